"""The memory board (a Telegram Mini App) as data: what one user sees of one of their scopes, by tier, and the
changes the page asks for, each through the engine's own calls (the ones the Telegram buttons make).

The page (``handlers/board.py`` serves it) shows what the engine says here and nothing else: the scope is
always the caller's own (derived from the user id Telegram signed, never from the request), and a handle is
checked against that scope by the engine before anything changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from companion.chat import texts
from companion.core import tiers
from companion.core.models import Memory, Scope, Status, Tier
from memory import MemoryEngine

# Columns as the page shows them, left to right.
COLUMNS: tuple[str, ...] = (Tier.SHORT.value, Tier.MEDIUM.value, Tier.LONG.value, "archived")
COLUMN_NAMES = {Tier.SHORT.value: "短期", Tier.MEDIUM.value: "中期", Tier.LONG.value: "长期", "archived": "已归档"}
ARCHIVED_SHOWN = 100  # the newest archived cards on the board; older ones stay in /memories' archive
SEARCH_LIMIT = 50


@dataclass(frozen=True, slots=True)
class ScopeChoice:
    """One of the caller's scopes the page can switch to."""

    chat_id: int | None  # None: the private chat
    name: str

    def key(self) -> str:
        return "private" if self.chat_id is None else str(self.chat_id)


def scope_choices(scopes: list[Scope], user_id: int) -> list[ScopeChoice]:
    """The private chat first, then each group the user has memories in (their own scope of it only)."""
    groups = sorted({s.chat_id for s in scopes if s.user_id == user_id and s.chat_id is not None})
    return [ScopeChoice(None, "私聊"), *(ScopeChoice(chat, f"群 {chat}") for chat in groups)]


def card(memory: Memory, now: datetime, tz: tzinfo, *, waiting: bool, due: bool) -> dict[str, Any]:
    """One memory as a card: its words (with its date), when it was learned, importance as the fade, where it
    came from, and marks for a review due and an open follow-up."""
    expires = memory.expires_at
    return {
        "id": memory.id,
        "text": memory.shown,
        "column": "archived" if memory.status is Status.ARCHIVED else memory.tier.value,
        "importance": round(memory.importance),
        # 0.35-1: the least important cards fade, none vanishes.
        "strength": round(0.35 + 0.65 * min(max(memory.importance, 0.0), 100.0) / 100.0, 2),
        "learned": _day(memory.created_at, tz),
        "fades": None if expires is None or memory.pinned else _day(expires, tz),
        "source": texts.ORIGIN_NAMES.get(memory.origin.value, memory.origin.value),
        "pinned": memory.pinned,
        "followup": waiting,
        "due": due,
    }


def _day(moment: datetime, tz: tzinfo) -> str:
    local = moment.astimezone(tz)
    return f"{local.month}月{local.day}日"


async def board(engine: MemoryEngine, scope: Scope, now: datetime, tz: tzinfo, query: str = "") -> dict[str, Any]:
    """The board of ``scope``: every active memory by tier (due reviews first, then the most important) and
    the newest archived ones, or with ``query`` the matches only; counts per column; the scope's version,
    which moves whenever any of its memories changes (the page polls it)."""
    if query:
        active = await engine.search(scope, query, now, limit=SEARCH_LIMIT)
        archived = await engine.search(scope, query, now, statuses={Status.ARCHIVED}, limit=SEARCH_LIMIT)
    else:
        active = await engine.memories(scope)
        archived = (await engine.memories(scope, {Status.ARCHIVED}))[-ARCHIVED_SHOWN:]
    waiting = await engine.followups.waiting(scope, active, now) if active and not query else set()
    due = {m.id for m in active if tiers.is_due(m, now)}
    cards = [card(m, now, tz, waiting=m.id in waiting, due=m.id in due) for m in [*active, *reversed(archived)]]
    cards.sort(key=lambda c: (COLUMNS.index(c["column"]), not c["due"], not c["pinned"], -c["importance"], -c["id"]))
    return {
        "version": await engine.version(scope),
        "columns": [{"key": key, "name": COLUMN_NAMES[key], "count": sum(c["column"] == key for c in cards)}
                    for key in COLUMNS],
        "cards": cards,
        "query": query,
    }


class BoardError(ValueError):
    """A request the board cannot carry out (an unknown column, empty words): answered 400, nothing changed."""


async def change(engine: MemoryEngine, scope: Scope, handle: int, action: str, now: datetime,
                 value: object = None) -> Memory:
    """One change the page asks for, through the engine (owner-checked: ``NotYourMemoryError`` for another
    scope's handle). Forgetting is not here: it goes through the chat's forget, as the buttons' does."""
    if action == "move":
        if value == "archived":
            return await engine.archive(scope, handle, now)
        try:
            tier = Tier(str(value))
        except ValueError:
            raise BoardError(f"no column {value!r}") from None
        memory = await engine.get(scope, handle)
        if memory.status is Status.ARCHIVED:
            memory = await engine.restore(scope, handle, now)
        return memory if memory.tier is tier else await engine.move(scope, handle, tier, now)
    if action == "restore":
        return await engine.restore(scope, handle, now)
    if action == "edit":
        words = str(value or "").strip()
        if not words:
            raise BoardError("empty words")
        return await engine.edit(scope, handle, words, now)
    if action == "pin":
        return await engine.pin(scope, handle, bool(value), now)
    if action == "quiet":
        memory = await engine.get(scope, handle)  # the owner check (403), which marking a thread does not make
        await engine.followups.stop(scope, handle, now)
        return memory
    raise BoardError(f"no action {action!r}")
