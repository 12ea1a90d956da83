"""Spare memory tables: empty tables at the current version, made ahead in the background, so a new
scope's first write takes one instead of running ``CREATE TABLE`` while its user waits.

Why: SQLite reads a new table's schema entry back by scanning the whole schema, ~1 ms per 1,000 scopes
(2.5-4.7 ms of a new user's 6-8 ms first write at 10,000 users). A taken spare is named ``mem_t<id>``
(validated integers only, like every memory table) and recorded on the scope's row (``scopes.table_id``);
a scope without one has ``mem_<scope key>``. The statements here run inside the caller's transaction,
except ``make_script``, a transaction of its own; ``Connection`` decides when.
"""

from __future__ import annotations

import aiosqlite

from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.sqlite.migrations import CURRENT_TABLE, CURRENT_TABLE_VERSION, register

SPARES = MigrationSet("spares", (
    # AUTOINCREMENT: an id handed out is never reused, so a new spare never takes a used table's name.
    Migration("0001_spare_tables", """
    CREATE TABLE spare_tables (id INTEGER PRIMARY KEY AUTOINCREMENT, version INTEGER NOT NULL)
    """),
))
register(SPARES)

SPARE_TABLES = 4  # new scopes arriving faster than one per few ms beyond this create their own tables


def spare_name(table_id: int) -> str:
    return f"mem_t{int(table_id)}"


def table_name(key: str, table_id: int | None) -> str:
    """The memory table of the scope with this (validated) key and ``scopes.table_id``."""
    return f"mem_{key}" if table_id is None else spare_name(table_id)


async def listed(conn: aiosqlite.Connection) -> tuple[list[int], int]:
    """Spares ready at the current version, oldest first, and the id the next one will have."""
    cursor = await conn.execute("SELECT id FROM spare_tables WHERE version = ? ORDER BY id", (CURRENT_TABLE_VERSION,))
    ready = [int(row[0]) for row in await cursor.fetchall()]
    cursor = await conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'spare_tables'")
    row = await cursor.fetchone()
    return ready, max([int(row[0]) if row else 0, *ready]) + 1


def make_script(table_id: int) -> str:
    """One new spare as one script with its own transaction: one trip to the database thread, where the
    ``CREATE TABLE`` (milliseconds at thousands of scopes) runs while the event loop does other work.
    ``table_id`` is an integer the caller computed (``listed``): a literal, never input."""
    return (f"BEGIN IMMEDIATE; INSERT INTO spare_tables (id, version) VALUES ({int(table_id)}, "
            f"{CURRENT_TABLE_VERSION}); {CURRENT_TABLE.format(table=spare_name(table_id))}; COMMIT;")


async def drop_stale(conn: aiosqlite.Connection) -> int:
    """Spares made by an older version of the code: dropped rather than upgraded (they hold nothing)."""
    cursor = await conn.execute("SELECT id FROM spare_tables WHERE version != ?", (CURRENT_TABLE_VERSION,))
    stale = [int(row[0]) for row in await cursor.fetchall()]
    for table_id in stale:
        await conn.execute(f'DROP TABLE IF EXISTS "{spare_name(table_id)}"')
        await conn.execute("DELETE FROM spare_tables WHERE id = ?", (table_id,))
    return len(stale)


async def take(conn: aiosqlite.Connection, table_id: int) -> bool:
    """Take a spare off the list; False if another process took it first."""
    cursor = await conn.execute("DELETE FROM spare_tables WHERE id = ? AND version = ?",
                                (table_id, CURRENT_TABLE_VERSION))
    return cursor.rowcount == 1


async def give_back(conn: aiosqlite.Connection, table_id: int) -> None:
    await conn.execute("INSERT INTO spare_tables (id, version) VALUES (?, ?)", (table_id, CURRENT_TABLE_VERSION))
