"""One turn's store traffic in two calls: ``turn_context`` reads what the reply needs (``TurnView``) and
``record_turn`` writes what happened (``TurnRecord``), each one unit of work. On a local file the calls
they replace were cheap; on a server database each is a network round trip, and a turn made six or more.
A backend implements ``TurnBatch`` as part of ``MemoryStore``; ``base.py`` holds the rest of the seam.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from companion.core.models import Scope, Turn
from companion.core.setting import GROUP_MEMORY, REVIEW_SENT, SHARE_PRIVATE
from companion.core.turnview import TurnView


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
    conversation: str | None = None  # the host's conversation state to keep (None: as it is; "": none)
    # When the user said something, kept with the conversation (written only with it): the follow-up round's
    # "not on a day the user wrote". None: nothing from the user this turn (a message written first).
    said_at: datetime | None = None


def setting_keys(scope: Scope) -> tuple[tuple[str, str | None], ...]:
    """(name, owner) of each setting ``TurnView`` carries, in ``setting_fields``'s order; a private scope's
    group settings have no owner (None: the read matches no row)."""
    chat = scope.chat_id
    return (
        (REVIEW_SENT.name.value, REVIEW_SENT.owner(scope)),
        (GROUP_MEMORY.name.value, None if chat is None else GROUP_MEMORY.owner(chat)),
        (SHARE_PRIVATE.name.value, None if chat is None else SHARE_PRIVATE.owner(scope.user_id)),
    )


def setting_fields(values: Sequence[str | None]) -> dict[str, Any]:
    """``TurnView``'s setting fields from the stored values ``setting_keys`` named (None: absent)."""
    review, group, share = values
    return {
        "review_sent": None if review is None else REVIEW_SENT.decode(review),
        "group_memory": group is None or GROUP_MEMORY.decode(group),  # absent: on
        "share_private": share is not None and SHARE_PRIVATE.decode(share),
    }


class TurnBatch(Protocol):
    """The two calls; part of ``base.MemoryStore``."""

    async def turn_context(self, scope: Scope, *, events: int, turns: int = 0, memories: bool = False) -> TurnView:
        """The scope's companion mode, profile, newest ``events`` events, change counter, pending edit,
        conversation state and the settings ``TurnView`` names; with ``turns`` its newest short-term turns,
        with ``memories`` its active memories. A scope never seen reads as empty and is not created."""
        ...

    async def record_turn(self, scope: Scope, record: TurnRecord) -> None:
        """Keep the short-term turn, queue the turns, count the accesses and mentions, keep the conversation
        state, in one transaction."""
        ...

    async def set_editing(self, scope: Scope, handle: int | None) -> None:
        """The user pressed "edit" on this memory: their next message, whichever process takes it, is its
        new text (``TurnView.editing``); None when that message came."""
        ...

    async def set_hinted(self, scope: Scope, at: datetime) -> None:
        """A hint went out to the scope at ``at`` (``TurnView.hinted_at``), whichever process sent it."""
        ...
