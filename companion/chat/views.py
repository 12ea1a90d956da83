"""What the memory commands show, as text and data: the ``/memories`` pages, ``/why`` and ``/stats``.

Shared by the Telegram handlers (which add buttons) and the console (which numbers the choices), so both
ask the engine the same questions and show the same answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, tzinfo

from companion.chat import texts
from companion.chat.requests import FORGET_MATCHES, forget_all_count
from companion.core.models import Memory, Scope, Status, Tier
from companion.core.timeutil import show
from memory import MemoryEngine

PAGE_SIZE = 5
QUERY_CHARS = 40  # a command's keyword (/memories, /forget, /why) is cut to this before any search
ORDER = {Tier.LONG: 0, Tier.MEDIUM: 1, Tier.SHORT: 2}


@dataclass(frozen=True, slots=True)
class Page:
    text: str
    shown: tuple[Memory, ...]  # empty: nothing to list (``text`` says so)
    page: int
    pages: int


async def memory_page(engine: MemoryEngine, scope: Scope, page: int, query: str, archived: bool,
                      now: datetime) -> Page:
    """One page of ``/memories``: the archived view, the matches of ``query``, or every active memory,
    long-term first. Looking at the list is not using a memory: only recalls and mentions in chat count."""
    if archived:
        found = await engine.memories(scope, {Status.ARCHIVED})
    elif query:
        found = await engine.search(scope, query, now, limit=50)
    else:
        found = await engine.memories(scope)
    found.sort(key=lambda m: (0 if archived else ORDER[m.tier], -m.importance, -m.id))
    if not found:
        empty = texts.NO_ARCHIVED if archived else texts.nothing_found(query) if query else texts.NO_MEMORIES
        return Page(empty, (), 0, 0)
    pages = max(1, math.ceil(len(found) / PAGE_SIZE))
    page = min(max(page, 0), pages - 1)
    shown = found[page * PAGE_SIZE:(page + 1) * PAGE_SIZE]
    waiting = set() if archived or query else await engine.followups.waiting(scope, found, now)
    return Page(texts.memory_list(shown, page, pages, query=query, archived=archived, waiting=waiting),
                tuple(shown), page, pages)


@dataclass(frozen=True, slots=True)
class ForgetPrompt:
    text: str
    matches: tuple[Memory, ...] = ()  # numbered choices: Telegram adds a button per match
    forget_all: int | None = None  # a confirmation of forgetting everything (this many memories)


async def forget_prompt(engine: MemoryEngine, scope: Scope, args: str, now: datetime) -> ForgetPrompt:
    """The answer to ``/forget <args>``: the matches to choose from, or the confirmation of ``all``."""
    args = args.strip()
    if not args:
        return ForgetPrompt("用法：/forget 关键词，或 /forget all 忘掉全部。")
    if args.lower() in {"all", "全部"}:
        # Offered even with no memory stored: queued turns and the short-term context go too.
        count = await forget_all_count(engine, scope)
        return ForgetPrompt(texts.confirm_forget_all(count), forget_all=count)
    query = args[:QUERY_CHARS]
    found = await engine.search(scope, query, now, limit=FORGET_MATCHES)
    if not found:
        return ForgetPrompt(texts.nothing_found(query))
    return ForgetPrompt(texts.confirm_forget(found), matches=tuple(found))


async def why_text(engine: MemoryEngine, scope: Scope, args: str, tz: tzinfo, now: datetime,
                   link: Callable[[Memory], str | None] = lambda _: None) -> tuple[str, bool]:
    """The answer to ``/why <args>`` and whether it shows a memory (then a group never sees it);
    ``link``: where the message it came from can be opened, if anywhere."""
    if not args:
        return "用法：/why 关键词", False
    found = await engine.search(scope, args, now, statuses={Status.ACTIVE, Status.ARCHIVED, Status.SUPERSEDED},
                                limit=1)
    if not found:
        return texts.nothing_found(args), False
    story = await engine.why(scope, found[0].id)

    def when(moment: object) -> str:
        return show(moment, tz) if isinstance(moment, datetime) else ""

    thread = next((t for t in await engine.followups.threads(scope) if t.handle == story.memory.id), None)
    text = texts.why(story.memory, story.replaced, story.replaced_by, when, link(story.memory))
    return text + texts.followed_up(thread, when), True


async def stats_text(engine: MemoryEngine, scope: Scope, now: datetime) -> str:
    s = await engine.stats(scope, now)
    threads = await engine.followups.threads(scope)
    sent = [t for t in threads if t.pushed_at is not None]
    return texts.stats({t.value: n for t, n in s.by_tier.items()}, {t.value: n for t, n in s.by_type.items()},
                       s.archived, s.learned_this_week, s.evicted_this_week,
                       followups=(len(sent), sum(t.answered for t in sent), sum(t.stopped for t in threads)))
