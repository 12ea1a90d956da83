"""A memory as a Dida365 card, and a card read back: pure rules, no I/O; every function takes what it needs.

One card per active memory: kind NOTE, the title a short summary, the content the design's markdown template
(type, content, context, keywords, related handles, and the handle's marker that lets a card be found again
after a create whose answer was lost), priority by tier and importance, the review day as an all-day due date
in the user's time zone with a reminder before it as the tier intends, and (``DIDA_TIER_TAGS``) a tag per tier
so the tier shows even where the app ignores the card's column. ``repeatFlag`` is never sent: the bot owns the
review schedule (completing a repeating task would leave it open and add a copy).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time
from zoneinfo import ZoneInfo

from companion.core import dates
from companion.core.models import Memory, MemoryType, Tier

PROJECT_NAME = "小滴の记忆"
COLUMN_NAMES: dict[Tier, str] = {Tier.SHORT: "短期记忆", Tier.MEDIUM: "中期记忆", Tier.LONG: "长期记忆"}
TIER_TAGS: dict[Tier, str] = {Tier.SHORT: "短期记忆", Tier.MEDIUM: "中期记忆", Tier.LONG: "长期记忆"}
TYPE_NAMES: dict[MemoryType, str] = {MemoryType.PREFERENCE: "偏好", MemoryType.FACT: "事实",
                                     MemoryType.INSTRUCTION: "约定", MemoryType.EVENT: "事件"}
TITLE_CHARS = 40
MARKER = "记忆编号"
_MARKER_RE = re.compile(rf"{MARKER}：#(\d+)")
_CONTENT_RE = re.compile(r"^\*\*内容\*\*：(.*)$", re.MULTILINE)
# Importance a priority chosen in the app stands for (the middle of the band ``priority`` maps to it).
IMPORTANCE_OF_PRIORITY = {5: 85.0, 3: 60.0, 1: 35.0, 0: 10.0}


@dataclass(frozen=True, slots=True)
class Card:
    """What the bot puts on a card, and what it compares a card read back against (the synced snapshot)."""

    title: str
    content: str
    tier: Tier
    priority: int
    due: str | None

    def fields(self) -> dict[str, object]:
        return {"title": self.title, "content": self.content, "tier": self.tier.value, "priority": self.priority,
                "due": self.due}


def title_of(event: str) -> str:
    return event if len(event) <= TITLE_CHARS else event[: TITLE_CHARS - 1] + "…"


def priority_of(memory: Memory) -> int:
    """Dida365's priorities 5 / 3 / 1 / 0: long-term or very important high, medium-term or important
    medium, a short-term memory of some weight low, the rest none."""
    if memory.tier is Tier.LONG or memory.importance >= 80:
        return 5
    if memory.tier is Tier.MEDIUM or memory.importance >= 50:
        return 3
    return 1 if memory.importance >= 20 else 0


def content_of(memory: Memory, tz: ZoneInfo, related: tuple[int, ...] = ()) -> str:
    learned = (memory.source_at or memory.created_at).astimezone(tz).strftime("%Y-%m-%d %H:%M")
    where = "群聊" if memory.source_chat_id is not None and memory.source_chat_id < 0 else "私聊"
    lines = [
        f"**类型**：{TYPE_NAMES[memory.type]}",
        f"**内容**：{memory.event}",
        f"**来源**：{learned}，{where}",
        f"**关键词**：{'、'.join(memory.keywords) or '无'}",
    ]
    if related:
        lines.append(f"**相关记忆**：{'、'.join(f'#{h}' for h in related)}")
    lines.append("")
    lines.append(f"{MARKER}：#{memory.id}（由小伴同步，改标题或“内容”一行就是改这条记忆）")
    return "\n".join(lines)


def card_of(memory: Memory, tz: ZoneInfo) -> Card:
    return Card(title_of(memory.event), content_of(memory, tz), memory.tier, priority_of(memory), due_date(memory, tz))


def due_date(memory: Memory, tz: ZoneInfo) -> str | None:
    """The day it happens (a yearly date: its next one), else the review day, as an all-day date at local
    midnight in Dida365's date format."""
    if memory.happens is not None:
        today = datetime.now(tz).date()
        day = dates.next_occurrence(memory.happens, today)
    elif memory.review_at is None:
        return None
    else:
        day = memory.review_at.astimezone(tz).date()
    return datetime.combine(day, time(0), tz).strftime("%Y-%m-%dT%H:%M:%S%z")


def reminder(tier: Tier, hour: int) -> str:
    """An all-day task's trigger counts from the due day's midnight: ``P0DT9H`` is the day at 09:00, and
    ``-P0DT15H`` is 09:00 the day before (midnight less 15 hours). Short-term: the review day; medium-term:
    one day before; long-term: one week before; at ``hour`` each time."""
    days_before = {Tier.SHORT: 0, Tier.MEDIUM: 1, Tier.LONG: 7}[tier]
    if days_before == 0:
        return f"TRIGGER:P0DT{hour}H0M0S"
    back = days_before * 24 - hour
    return f"TRIGGER:-P{back // 24}DT{back % 24}H0M0S"


def task_body(keywords: list[str], card: Card, project_id: str, column_id: str, tz: ZoneInfo, *, hour: int,
              tier_tags: bool, task_id: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {
        "projectId": project_id, "title": card.title, "content": card.content, "kind": "NOTE",
        "priority": card.priority, "columnId": column_id, "isAllDay": True, "timeZone": tz.key,
        "tags": ([TIER_TAGS[card.tier]] if tier_tags else []) + keywords[:5],
    }
    due = card.due
    if due is not None:
        body["startDate"] = due
        body["dueDate"] = due
        body["reminders"] = [reminder(card.tier, hour)]
    if task_id is not None:
        body["id"] = task_id
    return body


def handle_in(content: str) -> int | None:
    """The memory handle a card's marker names, or None for a card the user made."""
    found = _MARKER_RE.search(content or "")
    return int(found.group(1)) if found else None


def content_line(content: str) -> str | None:
    """The memory's words as the card's "内容" line says them (None when the user removed the line)."""
    found = _CONTENT_RE.search(content or "")
    return found.group(1).strip() if found else None


def tier_of_tags(tags: object) -> Tier | None:
    if not isinstance(tags, list):
        return None
    for tier, tag in TIER_TAGS.items():
        if tag in tags:
            return tier
    return None
