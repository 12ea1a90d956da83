"""SQLite statements of the change journal (``memory_changes``) and of typed settings (``settings``), the
journal's inside the caller's transaction: every memory write in ``sqlite.py``, ``forgetting.py``,
``decay.py`` and ``chatmove.py`` records its entries here before it commits, so a change and its entry
are kept or lost together. ``SQLiteStore`` decides what is written and when."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import aiosqlite

from companion.core.changes import Change, ChangeOp
from companion.core.models import Memory, Scope, Status
from companion.core.timeutil import from_db, to_db
from companion.storage.records import ENDS_THREAD, change_op
from companion.storage.rows import marks

Entry = tuple[int | None, ChangeOp]  # (handle, or None for the whole scope; what happened)

COUNTER = "SELECT COALESCE(max(seq), 0) FROM memory_changes WHERE scope_key = ?"


async def record(conn: aiosqlite.Connection, scope_key: str, entries: Sequence[Entry], now: datetime) -> None:
    if entries:
        stamp = to_db(now)
        await conn.executemany("INSERT INTO memory_changes (scope_key, handle, op, at) VALUES (?, ?, ?, ?)",
                               [(scope_key, handle, op.value, stamp) for handle, op in entries])
        ended = [(scope_key, h) for h, op in entries if h is not None and op in ENDS_THREAD]
        if ended:  # a tombstone's follow-up thread goes with it (``followups``)
            await conn.executemany("DELETE FROM followup_threads WHERE scope_key = ? AND handle = ?", ended)


async def update_entries(conn: aiosqlite.Connection, table: str, updates: Sequence[Memory]) -> list[Entry]:
    """The entries for ``updates`` of stored rows, read before they are written (status and tier before)."""
    if not updates:
        return []
    cursor = await conn.execute(f'SELECT id, status, tier FROM "{table}" WHERE id IN ({marks(updates)})',
                                tuple(m.id for m in updates))
    before = {int(mid): (Status(status), str(tier)) for mid, status, tier in await cursor.fetchall()}
    return [(m.id, change_op(*before[m.id], m)) for m in updates if m.id in before]


def counter(raw: sqlite3.Connection, scope: Scope) -> int:
    """The scope's newest ``seq``: one index lookup, run where the caller holds the connection."""
    row = raw.execute(COUNTER, (scope.key,)).fetchone()
    return int(row[0]) if row else 0


SINCE = "SELECT seq, handle, op, at FROM memory_changes WHERE scope_key = ? AND seq > ? ORDER BY seq LIMIT ?"


AFTER = "SELECT seq, scope_key, handle, op, at FROM memory_changes WHERE seq > ? ORDER BY seq LIMIT ?"


def every_change(rows: Iterable[Sequence[Any]]) -> list[Change]:
    """``AFTER``'s rows (of every scope) as changes."""
    return [Change(int(seq), Scope.from_key(str(key)), None if handle is None else int(handle), ChangeOp(op),
                   from_db(str(at))) for seq, key, handle, op, at in rows]


def changes(scope: Scope, rows: Iterable[Sequence[Any]]) -> list[Change]:
    """``SINCE``'s rows as changes."""
    return [Change(int(seq), scope, None if handle is None else int(handle), ChangeOp(op), from_db(str(at)))
            for seq, handle, op, at in rows]


async def prune(conn: aiosqlite.Connection, before: datetime) -> int:
    cursor = await conn.execute(
        "DELETE FROM memory_changes WHERE at < ? AND seq NOT IN "
        "(SELECT max(seq) FROM memory_changes GROUP BY scope_key)", (to_db(before),))
    return max(cursor.rowcount, 0)


# ---- typed settings --------------------------------------------------------------------------------


async def get_setting(conn: aiosqlite.Connection, name: str, owner: str) -> str | None:
    cursor = await conn.execute("SELECT value FROM settings WHERE name = ? AND owner = ?", (name, owner))
    row = await cursor.fetchone()
    return None if row is None else str(row[0])


def put_setting(conn: sqlite3.Connection, name: str, owner: str, value: str) -> None:
    conn.execute("INSERT INTO settings (name, owner, value) VALUES (?, ?, ?) "
                 "ON CONFLICT(name, owner) DO UPDATE SET value = excluded.value", (name, owner, value))


async def move_settings(conn: aiosqlite.Connection, names: Sequence[str], old_owner: str, new_owner: str) -> None:
    """The settings ``names`` of one owner pass to another; a value the new owner already has wins."""
    chosen = json.dumps(list(names))
    await conn.execute("INSERT OR IGNORE INTO settings (name, owner, value) SELECT name, ?, value FROM settings "
                       "WHERE owner = ? AND name IN (SELECT value FROM json_each(?))", (new_owner, old_owner, chosen))
    await conn.execute("DELETE FROM settings WHERE owner = ? AND name IN (SELECT value FROM json_each(?))",
                       (old_owner, chosen))
