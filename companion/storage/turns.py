"""One turn's store traffic in two calls: ``turn_context`` reads what the reply needs (``TurnView``) and
``record_turn`` writes what happened (``TurnRecord``), each one unit of work. On a local file the calls
they replace were cheap; on a server database each is a network round trip, and a turn made six or more.
A backend implements ``TurnBatch`` as part of ``MemoryStore``; ``base.py`` holds the rest of the seam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from companion.core.models import Memory, Profile, Scope, ShortItem, Turn


@dataclass(frozen=True, slots=True)
class TurnView:
    """What one reply needs, read at once (one consistent snapshot)."""

    change: int  # ``change_counter()`` as of this read: the caches compare it
    active: bool  # companion mode
    profile: tuple[Profile, bool] | None  # (profile, stale), None before the first build
    events: list[ShortItem]  # the newest events told, as many as asked for, oldest first
    turns: list[ShortItem]  # the newest short-term turns asked for, oldest first
    memories: list[Memory] | None  # the active memories, when asked for (an index to build); else None
    editing: int | None = None  # the memory whose new words the next message is (``set_editing``)


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """What one turn did, written at once: all of it or none."""

    at: datetime  # the turn's time: accesses and mentions are dated by it
    short: Turn | None = None  # kept as a short-term turn (with its key)
    keep: int = 200  # short-term turns kept: the newest ``keep`` stay
    recalled: bool = False  # whether ``short`` carried a recalled memory
    queued: Sequence[Turn] = ()  # for the extraction, oldest first (turns a failed write left waiting too)
    touched: Sequence[int] = ()  # memories shown to the reply: an access each
    mentioned: Sequence[int] = ()  # memories the reply mentioned


class TurnBatch(Protocol):
    """The two calls; part of ``base.MemoryStore``."""

    async def turn_context(self, scope: Scope, *, events: int, turns: int = 0, memories: bool = False) -> TurnView:
        """The scope's companion mode, profile, newest ``events`` events and change counter; with ``turns``
        its newest short-term turns, with ``memories`` its active memories. A scope never seen reads as
        empty and is not created."""
        ...

    async def record_turn(self, scope: Scope, record: TurnRecord) -> None:
        """Keep the short-term turn, queue the turns, count the accesses and mentions, in one transaction."""
        ...

    async def set_editing(self, scope: Scope, handle: int | None) -> None:
        """The user pressed "edit" on this memory: their next message, whichever process takes it, is its
        new text (``TurnView.editing``); None when that message came."""
        ...
