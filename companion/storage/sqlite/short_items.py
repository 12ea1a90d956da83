"""Short-term memory that survives a restart: the recent conversation turns (up to 200 kept, the last 10
go to the reply) and what the user reported today (up to 30 small events: ate, took medicine, worked
late). Owns its table and its migration set; ``SQLiteStore`` exposes it through ``MemoryStore``."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

import aiosqlite

from companion.core.models import ShortItem, ShortKind
from companion.core.timeutil import from_db, to_db
from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.rows import dump_keys, load_keys
from companion.storage.sqlite.migrations import register

SHORT_TERM = MigrationSet("short_term", (
    Migration("0001_short_term", """
    CREATE TABLE short_term (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_key TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('turn', 'event')),
        user_text TEXT NOT NULL,
        reply_text TEXT,
        recalled INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
    );
    CREATE INDEX short_term_scope ON short_term (scope_key, kind, id)
    """),
    # The keys of the turns an item holds or came from (space-separated), so forgetting a memory drops
    # exactly the items its turns told, whatever their words.
    Migration("0002_turn_keys", """
    ALTER TABLE short_term ADD COLUMN turn_keys TEXT
    """),
))
register(SHORT_TERM)


ADD = ("INSERT INTO short_term (scope_key, kind, user_text, reply_text, recalled, created_at, turn_keys) "
       "VALUES (?, ?, ?, ?, ?, ?, ?)")
TRIM = ("DELETE FROM short_term WHERE scope_key = ? AND kind = ? AND id NOT IN "
        "(SELECT id FROM short_term WHERE scope_key = ? AND kind = ? ORDER BY id DESC LIMIT ?)")
ITEMS = ("SELECT id, user_text, reply_text, recalled, created_at, turn_keys FROM short_term "
         "WHERE scope_key = ? AND kind = ? ORDER BY id DESC LIMIT ?")


def add_params(key: str, kind: ShortKind, user: str, reply: str | None, at: datetime, recalled: bool, keep: int,
               turn_keys: Sequence[str] = ()) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """The parameters of ``ADD`` and ``TRIM`` for one item."""
    return ((key, kind.value, user, reply, int(recalled), to_db(at), dump_keys(turn_keys)),
            (key, kind.value, key, kind.value, keep))


def to_items(rows: Iterable[Sequence[Any]], kind: ShortKind) -> list[ShortItem]:
    """``ITEMS``'s rows (newest first) as items, oldest first."""
    return [ShortItem(int(r[0]), kind, str(r[1]), None if r[2] is None else str(r[2]), from_db(str(r[4])), bool(r[3]),
                      load_keys(r[5]))
            for r in reversed(list(rows))]


async def add(conn: aiosqlite.Connection, key: str, kind: ShortKind, user: str, reply: str | None, at: datetime,
              recalled: bool, keep: int, turn_keys: Sequence[str] = ()) -> None:
    """Append one item and drop the oldest beyond ``keep`` of that kind, in the caller's transaction."""
    added, trim = add_params(key, kind, user, reply, at, recalled, keep, turn_keys)
    await conn.execute(ADD, added)
    await conn.execute(TRIM, trim)


async def items(conn: aiosqlite.Connection, key: str, kind: ShortKind, limit: int) -> list[ShortItem]:
    """The newest ``limit`` items of a kind, oldest first."""
    cursor = await conn.execute(ITEMS, (key, kind.value, limit))
    return to_items(await cursor.fetchall(), kind)


async def told_by(conn: aiosqlite.Connection, key: str, turn_keys: Collection[str]) -> list[int]:
    """The scope's items that hold or came from any of these turns."""
    if not turn_keys:
        return []
    cursor = await conn.execute("SELECT id, turn_keys FROM short_term WHERE scope_key = ? AND turn_keys IS NOT NULL",
                                (key,))
    wanted = set(turn_keys)
    return [int(r[0]) for r in await cursor.fetchall() if wanted.intersection(load_keys(r[1]))]


async def delete(conn: aiosqlite.Connection, key: str, ids: Sequence[int] | None, kind: ShortKind | None) -> None:
    """Drop some items by id, or every item of a kind (or of both kinds)."""
    if ids is not None:
        await conn.executemany("DELETE FROM short_term WHERE scope_key = ? AND id = ?", [(key, i) for i in ids])
    elif kind is not None:
        await conn.execute("DELETE FROM short_term WHERE scope_key = ? AND kind = ?", (key, kind.value))
    else:
        await conn.execute("DELETE FROM short_term WHERE scope_key = ?", (key,))
