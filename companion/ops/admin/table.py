"""A user's memories as a terminal table, for operators. Columns are padded by display width (a Chinese
character takes two cells), so Chinese text lines up in a terminal."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import tzinfo

from companion.core.models import Memory
from companion.core.timeutil import show

HEADERS = ("id", "层级", "事件", "关键词", "重要程度", "创建时间", "有效期", "最后提及时间", "类型", "提及次数")
MAX_CELL = 40  # display cells; longer text is cut with an ellipsis
TIER_NAMES = {"short": "短期", "medium": "中期", "long": "长期"}


def width(text: str) -> int:
    """Terminal cells: wide and full-width characters take two, combining marks none."""
    return sum(0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1
               for ch in text)


def clip(text: str, cells: int = MAX_CELL) -> str:
    text = " ".join(text.split())  # a newline in a memory would break the row
    if width(text) <= cells:
        return text
    out, used = [], 0
    for ch in text:
        w = width(ch)
        if used + w > cells - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def pad(text: str, cells: int, right: bool = False) -> str:
    space = " " * max(0, cells - width(text))
    return space + text if right else text + space


def memories_table(memories: Sequence[Memory], tz: tzinfo) -> str:
    rows = [
        (str(m.id), TIER_NAMES.get(m.tier.value, m.tier.value), clip(m.shown), clip(",".join(m.keywords), 24),
         f"{m.importance:.1f}", show(m.created_at, tz), m.validity.value, show(m.last_mentioned_at, tz),
         m.type.value, str(m.mention_count))
        for m in memories
    ]
    numeric = {0, 4, 9}
    widths = [max(width(row[i]) for row in [HEADERS, *rows]) for i in range(len(HEADERS))]
    lines = ["  ".join(pad(h, widths[i], i in numeric) for i, h in enumerate(HEADERS)).rstrip()]
    lines += ["  ".join(pad(cell, widths[i], i in numeric) for i, cell in enumerate(row)).rstrip() for row in rows]
    return "\n".join(lines)
