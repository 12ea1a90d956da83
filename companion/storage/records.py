"""What the store's backends share about the typed records (``core.setting``, ``core.journal``): which
settings a group's move takes along, how long the journal keeps, which change a memory write is
(``change_op``, decided here so every backend agrees), and the follow-up threads' records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from companion.core.changes import ChangeOp
from companion.core.models import Memory, Scope, Status, StatusReason
from companion.core.setting import SETTINGS, Keyed

# What a group's move to a new chat id takes along: every scope-keyed setting of its members, and these.
SCOPE_SETTINGS: tuple[str, ...] = tuple(s.name.value for s in SETTINGS if s.keyed is Keyed.SCOPE)
CHAT_SETTINGS_THAT_MOVE: tuple[str, ...] = tuple(s.name.value for s in SETTINGS if s.follows_chat)

# ---- the change journal --------------------------------------------------------------------------

# The journal keeps this long (the daily cleanup prunes older entries, but never a scope's newest one:
# a scope's change counter never goes back).
JOURNAL_KEEP = timedelta(days=30)


def drops_events(ids: object, kind: object) -> bool:
    """Whether dropping short-term items by ``ids`` or ``kind`` (``drop_short``) may drop events."""
    return ids is not None or kind in (None, "event")


_REMOVED: dict[str, ChangeOp] = {
    StatusReason.EVICTED: ChangeOp.EVICTED, StatusReason.FADED: ChangeOp.CLEANED,
    StatusReason.EXPIRED: ChangeOp.CLEANED, StatusReason.DUPLICATE: ChangeOp.CLEANED,
}


def forget_op(reason: str) -> ChangeOp:
    """The entry for a memory tombstoned for ``reason``."""
    return _REMOVED.get(reason, ChangeOp.FORGOTTEN)


def change_op(before_status: Status, before_tier: str, after: Memory) -> ChangeOp:
    """The entry for an update of a stored memory, from its status and tier before and its row after."""
    if after.status is not before_status:
        if after.status is Status.ACTIVE:
            return ChangeOp.RESTORED
        if after.status is Status.FORGOTTEN:
            return forget_op(after.status_reason)
        return ChangeOp.SUPERSEDED if after.status is Status.SUPERSEDED else ChangeOp.ARCHIVED
    return ChangeOp.TIER_MOVED if after.tier.value != before_tier else ChangeOp.EDITED


# ---- follow-up threads ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thread:
    """A told event the companion may follow up, kept beside its memory: the local days a message written
    first may go out (``due_on`` to ``until_on``, both included), when one was recorded (``pushed_at``, set
    before it is sent: at most once), whether the user answered it, and whether the user asked that it
    never be brought up (``stopped``). No words: forgetting the memory removes the row."""

    scope: Scope
    handle: int
    due_on: date
    until_on: date
    pushed_at: datetime | None = None
    answered: bool = False
    stopped: bool = False
    closed: bool = False  # its memory is no longer an active dated one (archived, superseded, undated)


@dataclass(frozen=True, slots=True)
class FollowUpScope:
    """What decides whether a scope's user may be written to first: ``/followup off``, when the last two
    follow-ups written first went out (oldest first), and when the user last said something."""

    off: bool = False
    sent: tuple[datetime, ...] = ()
    said_at: datetime | None = None


# A memory tombstoned takes its thread with it in the same transaction (forgetting reaches every copy).
ENDS_THREAD: frozenset[ChangeOp] = frozenset({ChangeOp.FORGOTTEN, ChangeOp.CLEANED, ChangeOp.EVICTED})
