"""Typed settings: the name of every setting a store keeps, what each value is keyed by (a scope, a chat,
a user, or nothing) and its type, with its text form. Data, not the store: the engine's callers name a
setting by these constants and the store's backends encode them the same way (``Setting.owner``,
``Setting.encode``), so every backend agrees on what is stored."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from companion.core.models import Scope, Switch
from companion.core.timeutil import from_db, to_db

K = TypeVar("K")
V = TypeVar("V")


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
