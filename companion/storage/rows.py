"""One mapping per record type between database rows and objects.

A memory column is declared once, in ``MEMORY_CODECS``: its name (the ``Memory`` attribute of the same
name) and how its value is written and read. Every SELECT, INSERT and UPDATE of memories is built from
that table, so a new column means one migration plus one line here (and ``ops.backup``'s CSV list when
it belongs in backups). ``tests/test_store_contract.py`` fails when ``Memory`` and this table disagree.
Also the placeholder list of an ``IN (...)`` and how many handles one statement may bind.
"""

from __future__ import annotations

import json
import operator
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from companion.core import dates
from companion.core.models import DynamicTrait, Memory, MemoryType, Origin, Profile, Status, Tier, Turn, Validity
from companion.core.rules import clamp_importance
from companion.core.timeutil import from_db, to_db

STORED_LEN = len("2025-01-01T00:00:00Z")
HANDLES_PER_STATEMENT = 500  # well under SQLite's 32,766 bound parameters


def marks(values: Collection[object]) -> str:
    """The ``?, ?, ...`` placeholders of an ``IN (...)`` list of ``values``."""
    return ", ".join("?" for _ in values)


@dataclass(frozen=True, slots=True)
class Codec:
    dump: Callable[[Any], object]
    load: Callable[[Any], Any]


def _opt(codec: Codec) -> Codec:
    return Codec(lambda v: None if v is None else codec.dump(v), lambda v: None if v is None else codec.load(v))


def _enum(kind: type[StrEnum], load: Callable[[str], Any] | None = None) -> Codec:
    members: dict[object, StrEnum] = {m.value: m for m in kind}

    def lookup(value: Any) -> Any:
        # A dict hit costs a fraction of ``kind(value)``; anything else still goes through the enum.
        found = members.get(value)
        return found if found is not None else (load or kind)(str(value))

    return Codec(lambda v: v.value, lookup)


def _load_time(value: Any) -> datetime:
    # ``fromisoformat`` reads the stored ``...Z`` form about 20x faster than ``strptime`` (``from_db``), which
    # on a profile and the turns read every turn was ~1% of a busy bot's CPU (docs/benchmarks-history.md section 15);
    # anything it would read differently (a naive or offset time) goes the strict way.
    text = str(value)
    if len(text) == STORED_LEN and text[-1] == "Z":
        return datetime.fromisoformat(text)
    return from_db(text)


INT = Codec(int, int)
TEXT = Codec(lambda v: v, str)  # None stays None, so NOT NULL still guards the column
TIME = Codec(to_db, _load_time)  # to_db remembers recent moments: a batch stamps rows alike
OPT_TIME = _opt(TIME)
OPT_INT = _opt(INT)
BOOL = Codec(int, bool)
IMPORTANCE = Codec(clamp_importance, float)
# Keywords never contain a comma (``normalize_keyword`` strips separators); terms are single words.
# Interned: the same words recur across memories and users, and every cached recall index holds them.
COMMA_LIST = Codec(lambda v: ",".join(v), lambda v: [sys.intern(k) for k in str(v).split(",") if k])
SPACE_LIST = Codec(lambda v: " ".join(v), lambda v: [sys.intern(w) for w in str(v or "").split()])

MEMORY_CODECS: Mapping[str, Codec] = {
    "id": INT,
    "event": TEXT,
    "keywords": COMMA_LIST,
    "importance": IMPORTANCE,
    "created_at": TIME,
    "validity": _enum(Validity),
    "last_mentioned_at": OPT_TIME,
    "updated_at": TIME,
    "expires_at": OPT_TIME,
    "type": _enum(MemoryType),
    "origin": _enum(Origin, lambda v: Origin.parse(str(v))),
    "mention_count": INT,
    "last_decay_at": TIME,
    "terms": SPACE_LIST,
    "status": _enum(Status),
    "tier": _enum(Tier),
    "review_at": OPT_TIME,
    "last_accessed_at": OPT_TIME,
    "access_count": INT,
    "pinned": BOOL,
    "source_chat_id": OPT_INT,
    "source_message_id": OPT_INT,
    "source_at": OPT_TIME,
    "superseded_by": OPT_INT,
    "status_reason": TEXT,
    "fingerprint": TEXT,
    "happens": Codec(dates.to_text, dates.from_text),  # ISO 8601 text: a day, a span, a yearly date
}
MEMORY_COLUMNS: tuple[str, ...] = tuple(MEMORY_CODECS)
SELECT_MEMORY = ", ".join(MEMORY_COLUMNS)
INSERT_MEMORY = f"({SELECT_MEMORY}) VALUES ({', '.join('?' for _ in MEMORY_COLUMNS)})"
# Written only by their own increments (an access, a mention: ``sqlite.turn``), never by a whole-row update: a
# merge or an edit writes a row read earlier, often from a cached index that never sees the increments, and
# would put back the counts of then (a retold memory lost every recall it had had).
USAGE_COLUMNS = frozenset({"last_mentioned_at", "mention_count", "last_accessed_at", "access_count"})
UPDATED_COLUMNS: tuple[str, ...] = tuple(c for c in MEMORY_COLUMNS if c != "id" and c not in USAGE_COLUMNS)
UPDATE_MEMORY = ", ".join(f"{c} = ?" for c in UPDATED_COLUMNS)


_DUMPS = tuple(codec.dump for codec in MEMORY_CODECS.values())
_FIELDS = operator.attrgetter(*MEMORY_CODECS)
_LOADS = tuple(codec.load for codec in MEMORY_CODECS.values())


def memory_to_row(memory: Memory) -> tuple[object, ...]:
    """Values in ``MEMORY_COLUMNS`` order."""
    return tuple(map(_call, _DUMPS, _FIELDS(memory)))


def _call(dump: Callable[[Any], object], value: object) -> object:
    return dump(value)


_UPDATED = tuple(i for i, c in enumerate(MEMORY_COLUMNS) if c in UPDATED_COLUMNS)


def memory_update_params(memory: Memory) -> tuple[object, ...]:
    """Values for ``UPDATE ... SET {UPDATE_MEMORY} WHERE id = ?``."""
    row = memory_to_row(memory)
    return (*(row[i] for i in _UPDATED), row[0])


def row_to_memory(row: Sequence[object]) -> Memory:
    # Positional: ``MEMORY_CODECS`` follows ``Memory``'s field order (tests/test_store_contract.py checks it).
    # Loading the big user's index decodes 10,000 rows, so this loop is kept lean.
    if len(row) != len(_LOADS):
        raise ValueError(f"memory row has {len(row)} values, expected {len(_LOADS)}")
    return Memory(*[load(value) for load, value in zip(_LOADS, row)])  # noqa: B905 (length checked above)


# ---- profiles and turns ----------------------------------------------------------------------------

PROFILE_COLUMNS = "core, dynamic, built_at, dirty"


def profile_to_row(profile: Profile) -> tuple[str, str]:
    dynamic = json.dumps([{"text": t.text, "keywords": list(t.keywords)} for t in profile.dynamic],
                         ensure_ascii=False)
    return profile.core, dynamic


def row_to_profile(row: Sequence[object]) -> tuple[Profile, bool]:
    """The profile and whether it is stale (memories changed since it was built)."""
    core, dynamic, built_at, dirty = row
    traits = [DynamicTrait(str(t["text"]), tuple(t["keywords"])) for t in json.loads(str(dynamic))]
    return Profile(core=str(core), dynamic=traits, built_at=_load_time(built_at)), bool(dirty)


TURN_COLUMNS = "id, user_text, reply_text, created_at, chat_id, message_id, turn_key"


def turn_to_row(turn: Turn) -> tuple[object, ...]:
    """Values for every column of ``TURN_COLUMNS`` but ``id``."""
    return turn.user, turn.reply, to_db(turn.at), turn.chat_id, turn.message_id, turn.key


def row_to_turn(row: Sequence[object]) -> Turn:
    mid, user, reply, at, chat_id, message_id, key = row
    return Turn(
        user=str(user), reply=None if reply is None else str(reply), at=_load_time(at),
        id=int(mid),  # type: ignore[call-overload]
        chat_id=OPT_INT.load(chat_id), message_id=OPT_INT.load(message_id), key=None if key is None else str(key),
    )


# ---- provenance: the turns a memory came from (``memory_sources``) ---------------------------------


def source_rows(ids: Sequence[int], keys: Sequence[str]) -> list[tuple[int, str]]:
    """Rows of ``memory_sources``: every memory written by one call came from the same turns."""
    return [(mid, key) for mid in ids for key in dict.fromkeys(keys) if key]


def renumbered(sources: Mapping[int, Collection[str]] | None, memories: Sequence[Memory],
               handles: Sequence[int]) -> dict[int, Collection[str]]:
    """``sources`` keyed by the handles ``memories`` are written under instead of the ones they had."""
    if not sources:
        return {}
    return {new: sources[m.id] for m, new in zip(memories, handles, strict=True) if m.id in sources}


def dump_keys(keys: Sequence[str]) -> str | None:
    """Turn keys in one column (``short_term.turn_keys``); keys are hex, never contain a space."""
    return " ".join(keys) or None


def load_keys(value: object) -> tuple[str, ...]:
    return tuple(str(value).split()) if value else ()
