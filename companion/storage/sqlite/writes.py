"""SQLite statements that write memory rows, inside the caller's transaction: fresh database-wide handles,
inserts of new memories, updates of stored ones, and the turns each came from (``memory_sources``).
``SQLiteStore`` decides what is written and when."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from companion.core.errors import StorageError
from companion.core.models import Memory, MemoryDraft
from companion.core.rules import new_memory
from companion.storage.rows import (
    HANDLES_PER_STATEMENT,
    INSERT_MEMORY,
    UPDATE_MEMORY,
    memory_to_row,
    memory_update_params,
    source_rows,
)


async def write(
    conn: aiosqlite.Connection, table: str, scope_key: str, inserts: Sequence[MemoryDraft],
    updates: Sequence[Memory], sources: Sequence[str], now: datetime,
) -> list[int]:
    """Insert ``inserts`` and update ``updates`` in ``table``, each told by ``sources``; returns the new ids."""
    ids = await insert(conn, table, scope_key, inserts, now)
    await update(conn, table, updates)
    await add_sources(conn, [*ids, *(m.id for m in updates)], sources)
    return ids


async def insert(
    conn: aiosqlite.Connection, table: str, scope_key: str, drafts: Sequence[MemoryDraft], now: datetime
) -> list[int]:
    if not drafts:
        return []
    ids = await new_handles(conn, scope_key, len(drafts))
    rows = [memory_to_row(new_memory(draft, mid, now)) for draft, mid in zip(drafts, ids, strict=True)]
    await conn.executemany(f'INSERT INTO "{table}" {INSERT_MEMORY}', rows)
    return ids


async def add_sources(conn: aiosqlite.Connection, ids: Sequence[int], sources: Sequence[str]) -> None:
    rows = source_rows(ids, sources)
    if rows:
        await conn.executemany("INSERT OR IGNORE INTO memory_sources (memory_id, turn_key) VALUES (?, ?)", rows)


async def new_handles(conn: aiosqlite.Connection, scope_key: str, count: int) -> list[int]:
    """``count`` fresh handles in a few statements (one per row was a thread hop each: bulk writes
    ran at a few hundred rows per second). AUTOINCREMENT hands out increasing ids in VALUES order
    while this transaction holds the write lock, so the sorted ids follow the drafts' order."""
    ids: list[int] = []
    for start in range(0, count, HANDLES_PER_STATEMENT):
        n = min(HANDLES_PER_STATEMENT, count - start)
        cursor = await conn.execute(
            f"INSERT INTO memory_handles (scope_key) VALUES {', '.join(['(?)'] * n)} RETURNING id", [scope_key] * n
        )
        ids.extend(sorted(int(row[0]) for row in await cursor.fetchall()))
    if len(ids) != count:
        raise StorageError(f"asked for {count} memory handles, got {len(ids)}")
    return ids


async def update(conn: aiosqlite.Connection, table: str, memories: Sequence[Memory]) -> None:
    if memories:
        await conn.executemany(f'UPDATE "{table}" SET {UPDATE_MEMORY} WHERE id = ?',
                               [memory_update_params(m) for m in memories])
