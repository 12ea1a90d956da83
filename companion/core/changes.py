"""The change journal's entries: what happened to a memory, or to every memory of a scope. Data the store
writes in the transaction of each change and its readers (the engine's caches, the kanban's outbox) compare."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from companion.core.models import Scope


class ChangeOp(StrEnum):
    """What happened to a memory (or, for the scope-wide ones, to every memory of a scope). Stored."""

    ADDED = "added"
    EDITED = "edited"
    TIER_MOVED = "tier_moved"
    ARCHIVED = "archived"
    RESTORED = "restored"
    FORGOTTEN = "forgotten"
    SUPERSEDED = "superseded"
    CLEANED = "cleaned"  # cleanup: faded, expired or a duplicate
    EVICTED = "evicted"  # dropped to keep the scope under its memory cap
    IMPORTED = "imported"  # written as it was (a restore, a kept earlier wording)
    DECAYED = "decayed"  # scope-wide: the daily decay lowered importances
    MOVED_CHAT = "moved_chat"  # scope-wide: the group moved to a new chat id (old and new scope)
    # Not a memory: the scope's short-term events (today's, told by extraction) were added or dropped, so a
    # cache of them reloads. Short-term turns are read afresh every time and write no entry.
    EVENTS = "events"


SCOPE_WIDE: frozenset[ChangeOp] = frozenset({ChangeOp.DECAYED, ChangeOp.MOVED_CHAT})  # every memory of the scope


@dataclass(frozen=True, slots=True)
class Change:
    """One journal entry. ``seq`` grows database-wide; ``handle`` is None for a scope-wide change."""

    seq: int
    scope: Scope
    handle: int | None
    op: ChangeOp
    at: datetime

