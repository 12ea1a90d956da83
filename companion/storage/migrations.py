"""Append-only migrations. Never edit a step that has shipped: add a new one at the end.

``SHARED`` steps run once per database (tracked by ``PRAGMA user_version``). ``PER_SCOPE`` steps run on
every memory table (tracked per table in ``scopes.table_version``), so a new column reaches old users'
tables at the next start.
"""

from __future__ import annotations

import aiosqlite

SHARED: tuple[str, ...] = (
    """
    CREATE TABLE scopes (
        key TEXT PRIMARY KEY,
        user_id INTEGER NOT NULL,
        chat_id INTEGER,
        table_version INTEGER NOT NULL DEFAULT 0,
        active INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
    );
    CREATE TABLE profiles (
        scope_key TEXT PRIMARY KEY REFERENCES scopes(key),
        core TEXT NOT NULL,
        dynamic TEXT NOT NULL,
        built_at TEXT NOT NULL,
        dirty INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE pending_turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_key TEXT NOT NULL REFERENCES scopes(key),
        user_text TEXT NOT NULL,
        reply_text TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX pending_turns_scope ON pending_turns (scope_key, id);
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
)

# ``{table}`` is always ``Scope.table``: built from validated integers, never from user text.
PER_SCOPE: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS "{table}" (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        event TEXT NOT NULL,
        keywords TEXT NOT NULL,
        importance REAL NOT NULL,
        created_at TEXT NOT NULL,
        validity TEXT NOT NULL CHECK (validity IN ('permanent', '30d', '7d')),
        last_mentioned_at TEXT,
        updated_at TEXT NOT NULL,
        expires_at TEXT,
        type TEXT NOT NULL,
        source TEXT NOT NULL,
        mention_count INTEGER NOT NULL DEFAULT 0,
        last_decay_at TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS "{table}_event" ON "{table}" (event);
    """,
    # v2: the event's words for the recall index ('' = not computed yet; the index segments it then).
    """
    ALTER TABLE "{table}" ADD COLUMN terms TEXT NOT NULL DEFAULT ''
    """,
)


async def migrate(conn: aiosqlite.Connection) -> None:
    """Bring shared tables and every memory table up to date, inside the caller's transaction."""
    cursor = await conn.execute("PRAGMA user_version")
    row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    for step in SHARED[version:]:
        await _run_script(conn, step)
    if version < len(SHARED):
        await conn.execute(f"PRAGMA user_version = {len(SHARED)}")
    cursor = await conn.execute(
        "SELECT key, table_version FROM scopes WHERE table_version < ?", (len(PER_SCOPE),)
    )
    for key, table_version in await cursor.fetchall():
        await _upgrade_table(conn, str(key), f"mem_{key}", int(table_version))


# What PER_SCOPE builds, as one statement, for brand-new tables: SQLite re-parses the whole schema after
# every ALTER TABLE, which made a new user's first write cost ~300 ms at 10,000 tables (BENCHMARKS.md).
# It equals PER_SCOPE[:CURRENT_TABLE_VERSION] (tests/test_storage.py checks); steps appended later still
# run on new tables after it, so forgetting to update this is slow, never wrong.
CURRENT_TABLE_VERSION = 2
CURRENT_TABLE = """
    CREATE TABLE IF NOT EXISTS "{table}" (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        event TEXT NOT NULL,
        keywords TEXT NOT NULL,
        importance REAL NOT NULL,
        created_at TEXT NOT NULL,
        validity TEXT NOT NULL CHECK (validity IN ('permanent', '30d', '7d')),
        last_mentioned_at TEXT,
        updated_at TEXT NOT NULL,
        expires_at TEXT,
        type TEXT NOT NULL,
        source TEXT NOT NULL,
        mention_count INTEGER NOT NULL DEFAULT 0,
        last_decay_at TEXT NOT NULL,
        terms TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX IF NOT EXISTS "{table}_event" ON "{table}" (event);
"""


async def create_memory_table(conn: aiosqlite.Connection, key: str, table: str) -> None:
    cursor = await conn.execute("SELECT table_version FROM scopes WHERE key = ?", (key,))
    row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    if version == 0:
        await _run_script(conn, CURRENT_TABLE.format(table=table))
        version = CURRENT_TABLE_VERSION
        await conn.execute("UPDATE scopes SET table_version = ? WHERE key = ?", (version, key))
    await _upgrade_table(conn, key, table, version)


async def memory_tables(conn: aiosqlite.Connection) -> list[str]:
    cursor = await conn.execute("SELECT key FROM scopes")
    return [f"mem_{row[0]}" for row in await cursor.fetchall()]


async def _upgrade_table(conn: aiosqlite.Connection, key: str, table: str, version: int) -> None:
    for step in PER_SCOPE[version:]:
        await _run_script(conn, step.format(table=table))
    if version < len(PER_SCOPE):
        await conn.execute("UPDATE scopes SET table_version = ? WHERE key = ?", (len(PER_SCOPE), key))


async def _run_script(conn: aiosqlite.Connection, script: str) -> None:
    # executescript would COMMIT our open transaction; run statement by statement instead.
    for statement in script.split(";"):
        if statement.strip():
            await conn.execute(statement)
