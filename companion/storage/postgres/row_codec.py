"""Row mapping between PostgreSQL rows and objects: the memory columns of ``storage.rows.MEMORY_CODECS`` with
the native types of this schema (``timestamptz``, ``text[]``, ``boolean``), scopes as (user_id, chat_id)
with 0 for a private chat, turns, short-term items and profiles.

Times keep whole seconds, as SQLite's text does, so both backends decay, compare and back up alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from companion.core.models import DynamicTrait, Memory, Profile, Scope, ShortItem, ShortKind, Turn
from companion.storage.rows import IMPORTANCE, MEMORY_CODECS, USAGE_COLUMNS, Codec, profile_to_row

__all__ = ["profile_to_row"]


def second(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("naive datetime: attach a timezone before storing")
    return moment.astimezone(UTC).replace(microsecond=0)


def _opt_second(moment: datetime | None) -> datetime | None:
    return None if moment is None else second(moment)


def _words(value: Any) -> list[str]:
    return [sys.intern(str(w)) for w in value or ()]


TIME = Codec(second, lambda v: v)
OPT_TIME = Codec(_opt_second, lambda v: v)
WORDS = Codec(list, _words)
BOOL = Codec(bool, bool)
_NATIVE = {"keywords": WORDS, "terms": WORDS, "pinned": BOOL, "importance": IMPORTANCE,
           "created_at": TIME, "updated_at": TIME, "last_decay_at": TIME, "last_mentioned_at": OPT_TIME,
           "expires_at": OPT_TIME, "review_at": OPT_TIME, "last_accessed_at": OPT_TIME, "source_at": OPT_TIME}
CODECS: Mapping[str, Codec] = {name: _NATIVE.get(name, codec) for name, codec in MEMORY_CODECS.items()}
COLUMNS: tuple[str, ...] = tuple(CODECS)
SELECT_MEMORY = ", ".join(COLUMNS)
# Scope first, then every memory column: ``$1, $2`` are the scope, ``$3...`` the row.
INSERT_MEMORY = (f"INSERT INTO memories (user_id, chat_id, {SELECT_MEMORY}) "
                 f"VALUES ({', '.join(f'${i}' for i in range(1, len(COLUMNS) + 3))})")
# Every column but the usage counts (``rows.USAGE_COLUMNS``: only their own increments write them).
_UPDATED = tuple(i for i, c in enumerate(COLUMNS) if i > 0 and c not in USAGE_COLUMNS)
UPDATE_MEMORY = ("UPDATE memories SET " + ", ".join(f"{COLUMNS[i]} = ${n}" for n, i in enumerate(_UPDATED, start=4))
                 + " WHERE user_id = $1 AND chat_id = $2 AND id = $3")
_DUMPS = tuple(c.dump for c in CODECS.values())
_LOADS = tuple(c.load for c in CODECS.values())


def key(scope: Scope) -> tuple[int, int]:
    """The scope's columns: a private chat is chat 0 (no Telegram chat has that id)."""
    return scope.user_id, scope.chat_id or 0


def scope_of(user_id: int, chat_id: int) -> Scope:
    return Scope(int(user_id), int(chat_id) or None)


def memory_to_row(memory: Memory) -> tuple[object, ...]:
    return tuple(dump(getattr(memory, name)) for name, dump in zip(COLUMNS, _DUMPS, strict=True))


def memory_update_row(scope: Scope, memory: Memory) -> tuple[object, ...]:
    """Values for ``UPDATE_MEMORY``."""
    row = memory_to_row(memory)
    return (*key(scope), row[0], *(row[i] for i in _UPDATED))


def row_to_memory(row: Iterable[Any]) -> Memory:
    return Memory(*[load(value) for load, value in zip(_LOADS, row, strict=True)])


def row_to_profile(row: Iterable[Any]) -> tuple[Profile, bool]:
    core, dynamic, built_at, dirty = row
    traits = [DynamicTrait(str(t["text"]), tuple(t["keywords"])) for t in json.loads(str(dynamic))]
    assert isinstance(built_at, datetime)
    return Profile(core=str(core), dynamic=traits, built_at=built_at), bool(dirty)


TURN_COLUMNS = "id, user_text, reply_text, created_at, message_chat_id, message_id, turn_key"


def turn_to_row(turn: Turn) -> tuple[object, ...]:
    """Values for every column of ``TURN_COLUMNS`` but ``id``."""
    return turn.user, turn.reply, second(turn.at), turn.chat_id, turn.message_id, turn.key


def row_to_turn(row: Iterable[Any]) -> Turn:
    mid, user, reply, at, chat_id, message_id, turn_key = row
    return Turn(user=user, reply=reply, at=at, id=int(mid), chat_id=chat_id, message_id=message_id, key=turn_key)


SHORT_COLUMNS = "id, kind, user_text, reply_text, created_at, recalled, turn_keys"


def row_to_short(row: Iterable[Any]) -> ShortItem:
    mid, kind, user, reply, at, recalled, keys = row
    return ShortItem(int(mid), ShortKind(kind), user, reply, at, bool(recalled), tuple(keys or ()))
