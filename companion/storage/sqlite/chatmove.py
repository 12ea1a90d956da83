"""SQLite statements that move one group member's scope to the group's new chat id (a group upgraded to a
supergroup), inside the caller's transaction, and the durable marker of a move under way (``chat_moves``:
written before the first member moves, deleted with the last step). ``SQLiteStore.move_chat`` decides
what moves and when."""

from __future__ import annotations

from datetime import datetime

import aiosqlite

from companion.core.models import Scope
from companion.core.timeutil import to_db

SCOPED_TABLES = ("memory_handles", "pending_turns", "short_term", "memory_vectors")


async def move_scope(conn: aiosqlite.Connection, old: Scope, new: Scope, old_table: str, new_table: str) -> None:
    """Both tables exist at the current version. Rows are copied rather than the table renamed: the new
    scope may exist already (written to before the move was seen), and its index keeps the name of its
    own table."""
    cursor = await conn.execute(f'PRAGMA table_info("{new_table}")')
    columns = ", ".join(f'"{row[1]}"' for row in await cursor.fetchall())
    await conn.execute(f'INSERT INTO "{new_table}" ({columns}) SELECT {columns} FROM "{old_table}"')
    await conn.execute(f'DROP TABLE "{old_table}"')
    await conn.execute("UPDATE scopes SET active = max(active, (SELECT active FROM scopes WHERE key = ?)) "
                       "WHERE key = ?", (old.key, new.key))
    for table in SCOPED_TABLES:
        await conn.execute(f"UPDATE {table} SET scope_key = ? WHERE scope_key = ?", (new.key, old.key))
    await conn.execute("UPDATE OR IGNORE profiles SET scope_key = ?, dirty = 1 WHERE scope_key = ?",
                       (new.key, old.key))
    await conn.execute("DELETE FROM profiles WHERE scope_key = ?", (old.key,))
    await conn.execute("DELETE FROM scopes WHERE key = ?", (old.key,))


async def mark_move(conn: aiosqlite.Connection, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
    # A marker already there (the handler wrote it, or a restart resumes) keeps its first start time.
    await conn.execute("INSERT OR IGNORE INTO chat_moves (old_chat_id, new_chat_id, started_at) VALUES (?, ?, ?)",
                       (old_chat_id, new_chat_id, to_db(now)))


async def clear_move(conn: aiosqlite.Connection, old_chat_id: int) -> None:
    await conn.execute("DELETE FROM chat_moves WHERE old_chat_id = ?", (old_chat_id,))


async def unfinished(conn: aiosqlite.Connection) -> list[tuple[int, int]]:
    cursor = await conn.execute("SELECT old_chat_id, new_chat_id FROM chat_moves ORDER BY started_at, old_chat_id")
    return [(int(old), int(new)) for old, new in await cursor.fetchall()]
