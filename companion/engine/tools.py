"""The memory tools a model may call, bound to the caller's scope in code; every host offers these.

``memory_tools(engine)`` (also ``MemoryEngine.tools()``) is the ``ToolFactory`` a host calls once per model
call with the caller's ``Scope``: the chat pipeline per reply, the console, another host's plugin. Every
tool is a closure over that scope, so no argument can name another user, chat or table.
A handle of another scope is refused by the engine's owner check (``NotYourMemoryError``) and reported
to the model exactly like a handle that does not exist, so a probe learns nothing and nothing changes.

The tools are thin: each calls the same engine API the user's own steering uses (``save_draft`` behind
"记住……", ``search``, ``edit``, ``move``, ``archive``, ``due_reviews``), and forgetting goes through the
host's ``forget`` when given (the chat service's also scrubs its short-term context), else the engine's.
Results are plain data; ``Tool`` bounds them (items and characters) before the model sees them.

Only ``save_memory`` is marked ``group_safe``: where many people read the answer (a group chat) a host
offers just that one, because whatever a read tool returns could be quoted to all of them; which tools a
group gets, and whether any, is the host's policy (the chat pipeline's ``GroupTurn``).

``ToolEngine`` is what the tools need of the engine (``memory.MemoryEngine`` has it), so this module
stays below ``memory.py`` and a test can hand in anything with those methods.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from contextvars import ContextVar
from datetime import datetime, time, timedelta, tzinfo
from typing import Annotated, Any, Protocol

from pydantic import Field

from companion.core import dates
from companion.core import tiers as tier_rules
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Tier, Validity
from companion.core.timeutil import local_date, utcnow
from companion.engine.values import EngineConfig, Saved
from companion.llm.toolkit import ResultBounds, Tool, ToolError, ToolFactory

log = logging.getLogger(__name__)

# Annotations must live at module level: ``Tool.function`` resolves them against these globals.
Content = Annotated[str, Field(min_length=1, max_length=200)]
Query = Annotated[str, Field(min_length=1, max_length=100)]
Handle = Annotated[int, Field(ge=1, le=10**12)]  # within SQLite's integers
Importance = Annotated[int, Field(ge=0, le=100)]
Limit = Annotated[int, Field(ge=1, le=20)]
Since = Annotated[str | None, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")]
Day = Annotated[str | None, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")]
Description = Annotated[str | None, Field(min_length=1, max_length=100)]
DaysOverdue = Annotated[int, Field(ge=0, le=365)]
TierList = Annotated[list[Tier] | None, Field(max_length=3)]
TypeList = Annotated[list[MemoryType] | None, Field(max_length=4)]
Seconds = Annotated[int | None, Field(ge=60, le=366 * 86400)]  # a minute to a year

Forget = Callable[[Scope, Iterable[int]], Awaitable[int]]
FORGET_CANDIDATES = 5
LIST_LIMIT = 20
BOUNDS = ResultBounds(max_items=LIST_LIMIT, max_string=200, max_chars=3000)
NOT_FOUND = "no memory with handle {handle} among this user's memories"
# The key of the turn being answered (``Turn.key``), set by the host around the model call: a memory the
# model saves in its own words still knows the turn that told it, so forgetting it drops that turn from
# the queue and the short-term context.
SOURCE_TURN: ContextVar[str | None] = ContextVar("source_turn", default=None)


class ToolEngine(Protocol):
    """The engine calls the tools make (``memory.MemoryEngine``'s public API)."""

    @property
    def config(self) -> EngineConfig: ...

    async def get(self, scope: Scope, handle: int) -> Memory: ...

    async def save(self, scope: Scope, draft: MemoryDraft, now: datetime) -> Saved: ...

    async def search(self, scope: Scope, query: str, now: datetime, *, tiers_: Collection[Tier] | None = None,
                     types: Collection[MemoryType] | None = None, since: datetime | None = None,
                     limit: int = 20, use: bool = False) -> list[Memory]: ...

    async def edit(self, scope: Scope, handle: int, text: str | None, now: datetime, *,
                   importance: float | None = None) -> Memory: ...

    async def move(self, scope: Scope, handle: int, tier: Tier, now: datetime) -> Memory: ...

    async def archive(self, scope: Scope, handle: int, now: datetime) -> Memory: ...

    async def memories(self, scope: Scope) -> list[Memory]: ...

    async def due_reviews(self, scope: Scope, now: datetime) -> list[tuple[Memory, tier_rules.Suggestion]]: ...

    async def forget(self, scope: Scope, ids: Iterable[int] | None = None) -> int: ...


def view(memory: Memory, tz: tzinfo) -> dict[str, Any]:
    """What the model sees of a memory: its handle and words, never bookkeeping it cannot act on."""
    when = memory.happens
    return {"handle": memory.id, "content": memory.event, "type": memory.type.value, "tier": memory.tier.value,
            "importance": round(memory.importance), "learned": local_date(memory.created_at, tz),
            **({"date": when.on.isoformat()} if when is not None else {}),
            **({"end_date": when.ends.isoformat()} if when is not None and when.ends is not None else {}),
            **({"yearly": True} if when is not None and when.yearly else {}),
            **({"status": memory.status.value} if not memory.is_active else {})}


def memory_tools(
    engine: ToolEngine, *, forget: Forget | None = None, clock: Callable[[], datetime] = utcnow
) -> ToolFactory:
    """The factory of the eight memory tools. ``forget`` (a host's, such as the chat service's, which also
    scrubs its short-term context) defaults to the engine's."""
    tz = engine.config.tz

    async def drop(scope: Scope, handles: Iterable[int]) -> int:
        if forget is not None:
            return await forget(scope, handles)
        return await engine.forget(scope, handles)

    def build(scope: Scope) -> list[Tool]:
        async def owned(handle: int) -> Memory:
            try:
                return await engine.get(scope, handle)
            except (MemoryNotFoundError, NotYourMemoryError):
                # The same answer for both: a handle of another user must not even be confirmed to exist.
                raise ToolError(NOT_FOUND.format(handle=handle)) from None

        async def save_memory(content: Content, type: MemoryType = MemoryType.FACT, tier: Tier = Tier.MEDIUM,
                              importance: Importance = 60, date: Day = None, end_date: Day = None,
                              yearly: bool = False, valid_seconds: Seconds = None) -> dict[str, Any]:
            """Remember one thing about the user (when asked to, or when it matters for weeks).

            Args:
                content: one short sentence in the user's language, without relative days like 明天.
                type: instruction = how the user wants to be talked to.
                tier: long = lasting core facts, medium = weeks, short = days.
                importance: 0-100; health and safety >= 80, passing moods < 30.
                date: the day it happens (YYYY-MM-DD), for an event or plan; none for lasting facts.
                end_date: the last day of a span (YYYY-MM-DD).
                yearly: true for a birthday or anniversary.
                valid_seconds: forget it exactly this many seconds from now (a reminder for tonight); none:
                    the tier decides how long it lasts.
            """
            now = clock()
            told = SOURCE_TURN.get()
            today = now.astimezone(tz).date()
            words = dates.resolve_for(type, content, today)
            given = dates.model_when({"date": date, "end_date": end_date, "yearly": yearly}, today)
            draft = MemoryDraft(event=words.text, keywords=[], importance=float(importance), type=type,
                                validity=tier_rules.VALIDITY_OF[tier], origin=Origin.TOOL, tier=tier, source_at=now,
                                source_turns=(told,) if told else (), happens=given or words.when)
            if valid_seconds is not None:
                draft.validity = lifetime_validity(valid_seconds)
                draft.expires_at = now + timedelta(seconds=valid_seconds)
            saved = await engine.save(scope, draft, now)
            if scope.chat_id is not None:
                # A group hears the reply: the result names the saved memory, never its stored words
                # (a save that merged into an older memory would otherwise bring that one's text along).
                return {"saved": {"handle": saved.memory.id, "tier": saved.memory.tier.value}}
            if saved.replaced is not None:  # the same fact in other words: say what it said before
                return {"saved": view(saved.memory, tz), "replaced_words": saved.replaced.event}
            return {"saved": view(saved.memory, tz)}

        async def search_memories(query: Query, tiers: TierList = None, types: TypeList = None,
                                  since: Since = None, limit: Limit = 5) -> dict[str, Any]:
            """Search the user's memories, newest first.

            Args:
                since: learned on or after this day (YYYY-MM-DD).
            """
            now = clock()
            found = await engine.search(scope, query, now, tiers_=tiers, types=types,
                                        since=_day_start(since, tz), limit=limit, use=True)
            return {"memories": [view(m, tz) for m in found if not m.is_expired(now)]}

        async def update_memory(handle: Handle, content: Content | None = None,
                                importance: Importance | None = None) -> dict[str, Any]:
            """Correct the words and/or the importance of one memory."""
            if content is None and importance is None:
                raise ToolError("give content or importance (or both)")
            await owned(handle)
            memory = await engine.edit(scope, handle, content, clock(),
                                       importance=None if importance is None else float(importance))
            return {"updated": view(memory, tz)}

        async def forget_memory(handle: Handle | None = None, description: Description = None) -> dict[str, Any]:
            """Forget a memory the user asked you to forget, by handle or by description (if several
            match, nothing is forgotten and they are returned: call again with a handle)."""
            if (handle is None) == (description is None):
                raise ToolError("give exactly one of handle or description")
            if handle is None:
                assert description is not None
                found = await engine.search(scope, description, clock(), limit=FORGET_CANDIDATES)
                if not found:
                    raise ToolError(f"no memory matches {description!r}")
                if len(found) > 1:
                    return {"forgotten": 0, "candidates": [view(m, tz) for m in found],
                            "next": "ask the user which one, then call again with its handle"}
                handle = found[0].id
            else:
                await owned(handle)
            return {"forgotten": await drop(scope, [handle]), "handle": handle}

        async def list_memories(tier: Tier | None = None) -> dict[str, Any]:
            """List the user's memories, most important first."""
            now = clock()
            found = [m for m in await engine.memories(scope) if (tier is None or m.tier is tier)
                     and not m.is_expired(now)]
            found.sort(key=lambda m: (tier_rules.ORDER.index(m.tier), m.importance, m.id), reverse=True)
            return {"total": len(found), "memories": [view(m, tz) for m in found[:LIST_LIMIT]]}

        async def move_memory(handle: Handle, tier: Tier) -> dict[str, Any]:
            """Move a memory to another tier."""
            await owned(handle)
            return {"moved": view(await engine.move(scope, handle, tier, clock()), tz)}

        async def archive_memory(handle: Handle) -> dict[str, Any]:
            """Archive a memory that no longer matters (never recalled; the user can restore it)."""
            await owned(handle)
            memory = await engine.archive(scope, handle, clock())
            return {"archived": memory.id}

        async def get_due_memories(days_overdue: DaysOverdue = 0) -> dict[str, Any]:
            """Memories due for review, each with a suggested action and why.

            Args:
                days_overdue: at least this many days past their review date.
            """
            now = clock()
            due = []
            for memory, suggestion in await engine.due_reviews(scope, now):
                late = max((now - (memory.review_at or now)).days, 0)
                if late >= days_overdue:
                    due.append({**view(memory, tz), "days_overdue": late, "suggestion": suggestion.action.value,
                                "reason": suggestion.reason})
            return {"due": due}

        readers = (search_memories, update_memory, forget_memory, list_memories, move_memory, archive_memory,
                   get_due_memories)
        return [Tool.function(save_memory, bounds=BOUNDS, group_safe=True),
                *(Tool.function(fn, bounds=BOUNDS) for fn in readers)]

    return build


def lifetime_validity(seconds: int) -> Validity:
    """The validity an exact lifetime of ``seconds`` is stored with: the shortest that outlasts it, so the
    nightly cleanup removes the memory once its end has passed; past 30 days none does, and reads skip it
    after its end (a validity's decay would fade it before)."""
    if seconds <= 0:
        return Validity.PERMANENT
    return Validity.DAYS_7 if seconds <= 7 * 86400 else Validity.DAYS_30 if seconds <= 30 * 86400 \
        else Validity.PERMANENT


def _day_start(day: str | None, tz: tzinfo) -> datetime | None:
    if day is None:
        return None
    try:
        parsed = datetime.strptime(day, "%Y-%m-%d").date()
    except ValueError:
        raise ToolError(f"since {day!r} is not a real date (YYYY-MM-DD)") from None
    return datetime.combine(parsed, time(0), tzinfo=tz)
