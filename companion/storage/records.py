"""The typed records the store protocols carry besides memories: typed settings and the change journal's
entries. Shared by every backend, so they agree on what is stored: a setting's owner and value are
encoded here to text (``Setting.owner``, ``Setting.encode``), and which change a memory write is
(``change_op``) is decided here. Layers above import these through ``base``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

from companion.core.models import Memory, Scope, Status, StatusReason, Switch
from companion.core.timeutil import from_db, to_db

K = TypeVar("K")
V = TypeVar("V")

# ---- typed settings ------------------------------------------------------------------------------


class SettingName(StrEnum):
    """Every setting a store keeps; the values are stored, so they never change."""

    GROUP_MEMORY = "group_memory"  # per chat: the group's memory switch (absent: on)
    SHARE_PRIVATE = "share_private"  # per user: private memories may be used in groups
    MOVED_TO = "moved_to"  # per chat: the id an upgraded group moved to
    LAST_DECAY_AT = "last_decay_at"  # database-wide: when the daily decay last finished
    REVIEW_SENT = "review_sent"  # per scope: when the last review message went out
    WEEKLY = "weekly"  # per scope: the weekly summary switch
    WEEKLY_SENT = "weekly_sent"  # per scope: when the last weekly summary went out
    LAST_EXTRACTION = "last_extraction"  # per scope: when the last extraction ran
    # Kept for a host that embeds the engine (the AstrBot plugin): what it needs beside the memories.
    HOST_LABEL = "host_label"  # per scope: who the scope is, as the host names it (exports)
    EXACT_EXPIRY = "exact_expiry"  # per scope: {handle: unix time} for lifetimes finer than a validity
    IMPORTED = "imported"  # per scope: {record digest: handle} of records imported from another plugin
    HOST_ADDRESS = "host_address"  # per scope: where the host reaches the scope's person (weekly, follow-ups)
    FOLLOWUP_CUES = "followup_cues"  # per scope: {handle: times a reply was cued with it} (a host without sessions)
    FOLLOWUP_SEQ = "followup_seq"  # database-wide: the change journal's entry the follow-up threads are read up to
    MIGRATING = "migrating"  # database-wide: a ``migrate`` into this database started (its time), '' once verified


class Keyed(StrEnum):
    """What one value of a setting belongs to."""

    SCOPE = "scope"
    CHAT = "chat"
    USER = "user"
    DATABASE = "database"


def _bool(text: str) -> bool:
    return text == Switch.ON


def _switch(value: bool) -> str:
    return Switch.of(value).value


def _json(value: Mapping[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _json_map(text: str) -> Any:
    found = json.loads(text)
    return dict(found) if isinstance(found, dict) else {}


@dataclass(frozen=True, slots=True)
class Setting(Generic[K, V]):
    """A setting's name, what its values are keyed by (``K``: ``Scope``, a chat or user id, or None for
    the database) and the type of its values (``V``), with their text form: switches are ``on``/``off``,
    times the stored UTC form, integers their digits. ``follows_chat``: a chat-keyed value that moves with
    the group when the group changes its id (scope-keyed values always move)."""

    name: SettingName
    keyed: Keyed
    encode: Callable[[V], str]
    decode: Callable[[str], V]
    follows_chat: bool = False

    def owner(self, key: K) -> str:
        """The text a value is stored under: a scope key, a chat or user id, or '' for the database."""
        if self.keyed is Keyed.DATABASE:
            if key is not None:
                raise TypeError(f"{self.name} is database-wide; its key is None")
            return ""
        if self.keyed is Keyed.SCOPE:
            if not isinstance(key, Scope):
                raise TypeError(f"{self.name} is keyed by a Scope, got {key!r}")
            return key.key
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"{self.name} is keyed by a {self.keyed} id, got {key!r}")
        return str(key)


GROUP_MEMORY: Setting[int, bool] = Setting(SettingName.GROUP_MEMORY, Keyed.CHAT, _switch, _bool, follows_chat=True)
SHARE_PRIVATE: Setting[int, bool] = Setting(SettingName.SHARE_PRIVATE, Keyed.USER, _switch, _bool)
MOVED_TO: Setting[int, int] = Setting(SettingName.MOVED_TO, Keyed.CHAT, str, int)
LAST_DECAY_AT: Setting[None, datetime] = Setting(SettingName.LAST_DECAY_AT, Keyed.DATABASE, to_db, from_db)
REVIEW_SENT: Setting[Scope, datetime] = Setting(SettingName.REVIEW_SENT, Keyed.SCOPE, to_db, from_db)
WEEKLY: Setting[Scope, bool] = Setting(SettingName.WEEKLY, Keyed.SCOPE, _switch, _bool)
WEEKLY_SENT: Setting[Scope, datetime] = Setting(SettingName.WEEKLY_SENT, Keyed.SCOPE, to_db, from_db)
LAST_EXTRACTION: Setting[Scope, datetime] = Setting(SettingName.LAST_EXTRACTION, Keyed.SCOPE, to_db, from_db)

HOST_LABEL: Setting[Scope, str] = Setting(SettingName.HOST_LABEL, Keyed.SCOPE, str, str)
EXACT_EXPIRY: Setting[Scope, dict[str, float]] = Setting(SettingName.EXACT_EXPIRY, Keyed.SCOPE, _json, _json_map)
IMPORTED: Setting[Scope, dict[str, int]] = Setting(SettingName.IMPORTED, Keyed.SCOPE, _json, _json_map)
HOST_ADDRESS: Setting[Scope, str] = Setting(SettingName.HOST_ADDRESS, Keyed.SCOPE, str, str)
FOLLOWUP_CUES: Setting[Scope, dict[str, int]] = Setting(SettingName.FOLLOWUP_CUES, Keyed.SCOPE, _json, _json_map)
FOLLOWUP_SEQ: Setting[None, int] = Setting(SettingName.FOLLOWUP_SEQ, Keyed.DATABASE, str, int)
MIGRATING: Setting[None, str] = Setting(SettingName.MIGRATING, Keyed.DATABASE, str, str)

SETTINGS: tuple[Setting[Any, Any], ...] = (
    GROUP_MEMORY, SHARE_PRIVATE, MOVED_TO, LAST_DECAY_AT, REVIEW_SENT, WEEKLY, WEEKLY_SENT, LAST_EXTRACTION,
    HOST_LABEL, EXACT_EXPIRY, IMPORTED, HOST_ADDRESS, FOLLOWUP_CUES, FOLLOWUP_SEQ, MIGRATING,
)
# What a group's move to a new chat id takes along: every scope-keyed setting of its members, and these.
SCOPE_SETTINGS: tuple[str, ...] = tuple(s.name.value for s in SETTINGS if s.keyed is Keyed.SCOPE)
CHAT_SETTINGS_THAT_MOVE: tuple[str, ...] = tuple(s.name.value for s in SETTINGS if s.follows_chat)

# ---- the change journal --------------------------------------------------------------------------

# The journal keeps this long (the daily cleanup prunes older entries, but never a scope's newest one:
# a scope's change counter never goes back).
JOURNAL_KEEP = timedelta(days=30)


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


def drops_events(ids: object, kind: object) -> bool:
    """Whether dropping short-term items by ``ids`` or ``kind`` (``drop_short``) may drop events."""
    return ids is not None or kind in (None, "event")


@dataclass(frozen=True, slots=True)
class Change:
    """One journal entry. ``seq`` grows database-wide; ``handle`` is None for a scope-wide change."""

    seq: int
    scope: Scope
    handle: int | None
    op: ChangeOp
    at: datetime


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
