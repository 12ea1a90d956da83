"""SQLite's named, append-only migration sets (``migration_sets.MigrationSet``), one per owner of tables, and
their runner. Never edit a step that has shipped: add one.

Database-wide sets (``CORE``) are tracked by name in the ``migrations`` table and run when the database
opens. The per-scope set (``MEMORIES``) runs on one memory table at a time: when its scope is first opened
or touched, or in background batches (``SQLiteStore.upgrade_stale``); never all at start-up, so start-up
time does not grow with the number of users. Its progress is ``scopes.table_version`` (steps applied).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Sequence

import aiosqlite

from companion.storage.migration_sets import Migration, MigrationSet

log = logging.getLogger(__name__)


async def run_script(conn: aiosqlite.Connection, script: str) -> None:
    # executescript would COMMIT the caller's open transaction; run statement by statement instead. A
    # trigger's body holds semicolons of its own: pieces are joined until SQLite calls the statement complete.
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                await conn.execute(pending)
            pending = ""
    if pending.strip(" \n;"):
        await conn.execute(pending)


# ---- database-wide -------------------------------------------------------------------------------

CORE = MigrationSet("core", (
    Migration("0001_initial", """
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
    """),
    # Memory handles: one id space for every memory table, so a handle names one memory in the whole
    # database and its owner can be checked. AUTOINCREMENT: a forgotten handle is never handed out again.
    Migration("0002_memory_handles", """
    CREATE TABLE memory_handles (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_key TEXT NOT NULL
    );
    CREATE INDEX memory_handles_scope ON memory_handles (scope_key)
    """),
    # The message a queued turn came from, so an extracted memory can name its source.
    Migration("0003_turn_source", """
    ALTER TABLE pending_turns ADD COLUMN chat_id INTEGER;
    ALTER TABLE pending_turns ADD COLUMN message_id INTEGER
    """),
    # The spare table a scope took (``spares``); NULL: its table is ``mem_<key>``.
    Migration("0004_scope_table_id", """
    ALTER TABLE scopes ADD COLUMN table_id INTEGER
    """),
    # Provenance for forgetting: a queued turn's random key, and the turns each memory came from (by
    # handle, which names its scope; content-free, so a tombstone keeps them). Forgetting a memory drops
    # exactly its turns from the queue and the short-term context; extraction skips a queued turn that a
    # forgotten memory came from.
    Migration("0005_turn_provenance", """
    ALTER TABLE pending_turns ADD COLUMN turn_key TEXT;
    CREATE TABLE memory_sources (
        memory_id INTEGER NOT NULL,
        turn_key TEXT NOT NULL,
        PRIMARY KEY (memory_id, turn_key)
    ) WITHOUT ROWID;
    CREATE INDEX memory_sources_turn ON memory_sources (turn_key)
    """),
    # A group's move to its new chat id, written before the first member moves and deleted with the
    # last step, so a move a crash cut short is found and finished at the next start.
    Migration("0006_chat_moves", """
    CREATE TABLE chat_moves (
        old_chat_id INTEGER PRIMARY KEY,
        new_chat_id INTEGER NOT NULL,
        started_at TEXT NOT NULL
    )
    """),
    # Typed settings (``core.setting.SETTINGS``) in a table of their own, keyed by (name, owner: a scope key, a
    # chat or user id, '' for the database); the values the ``meta`` keys held move over unchanged.
    Migration("0007_settings", """
    CREATE TABLE settings (
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (name, owner)
    ) WITHOUT ROWID;
    INSERT OR IGNORE INTO settings (name, owner, value)
        SELECT 'moved_to', substr(key, 7, length(key) - 9), value FROM meta WHERE key GLOB 'moved:*:to';
    INSERT OR IGNORE INTO settings (name, owner, value)
        SELECT 'last_decay_at', '', value FROM meta WHERE key = 'last_decay_at';
    INSERT OR IGNORE INTO settings (name, owner, value)
        SELECT substr(key, 1, instr(key, ':') - 1), substr(key, instr(key, ':') + 1), value FROM meta
        WHERE substr(key, 1, instr(key, ':') - 1) IN
            ('group_memory', 'share_private', 'review_sent', 'weekly', 'weekly_sent', 'last_extraction')
        AND key NOT GLOB 'moved:*';
    DELETE FROM meta WHERE key GLOB 'moved:*:to' OR key = 'last_decay_at' OR substr(key, 1, instr(key, ':') - 1) IN
        ('group_memory', 'share_private', 'review_sent', 'weekly', 'weekly_sent', 'last_extraction')
    """),
    # The change journal (``journal.py``): one entry per change of a memory, written in the change's
    # transaction. AUTOINCREMENT: a pruned ``seq`` is never handed out again, so counters only grow.
    Migration("0008_memory_changes", """
    CREATE TABLE memory_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        scope_key TEXT NOT NULL,
        handle INTEGER,
        op TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE INDEX memory_changes_scope ON memory_changes (scope_key, seq)
    """),
))
SHARED_SETS: tuple[MigrationSet, ...] = (CORE,)  # owners in other modules append theirs: see register()


def register(migration_set: MigrationSet) -> None:
    """Add a table owner's migration set (its module calls this at import). Order of registration is the
    order the sets run in; each set's steps stay append-only."""
    global SHARED_SETS
    if all(s.owner != migration_set.owner for s in SHARED_SETS):
        SHARED_SETS = (*SHARED_SETS, migration_set)


async def migrate_shared(conn: aiosqlite.Connection, now: str, sets: Sequence[MigrationSet] | None = None) -> None:
    """Apply the database-wide steps not applied yet (of ``SHARED_SETS`` unless given), inside the caller's
    transaction."""
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS migrations (owner TEXT NOT NULL, name TEXT NOT NULL, applied_at TEXT NOT NULL, "
        "PRIMARY KEY (owner, name))"
    )
    cursor = await conn.execute("PRAGMA user_version")
    row = await cursor.fetchone()
    if row is not None and int(row[0]) >= 1:
        # Databases from before named migrations counted the core steps in user_version.
        for name in CORE.names[: int(row[0])]:
            await conn.execute("INSERT OR IGNORE INTO migrations VALUES ('core', ?, ?)", (name, now))
        await conn.execute("PRAGMA user_version = 0")
    cursor = await conn.execute("SELECT owner, name FROM migrations")
    done = {(str(o), str(n)) for o, n in await cursor.fetchall()}
    for migration_set in SHARED_SETS if sets is None else sets:
        for step in migration_set.steps:
            if (migration_set.owner, step.name) in done:
                continue
            await run_script(conn, step.script)
            await conn.execute("INSERT INTO migrations VALUES (?, ?, ?)", (migration_set.owner, step.name, now))


# ---- per memory table ----------------------------------------------------------------------------

# The table of step 0003 (shipped: never edit). Steps after it change this shape with their own SQL.
V3_COLUMNS = """(
        id INTEGER PRIMARY KEY,
        event TEXT NOT NULL,
        keywords TEXT NOT NULL,
        importance REAL NOT NULL,
        created_at TEXT NOT NULL,
        validity TEXT NOT NULL CHECK (validity IN ('permanent', '30d', '7d')),
        last_mentioned_at TEXT,
        updated_at TEXT NOT NULL,
        expires_at TEXT,
        type TEXT NOT NULL,
        origin TEXT NOT NULL,
        mention_count INTEGER NOT NULL DEFAULT 0,
        last_decay_at TEXT NOT NULL,
        terms TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL DEFAULT 'active'
            CHECK (status IN ('active', 'archived', 'superseded', 'forgotten')),
        tier TEXT NOT NULL CHECK (tier IN ('short', 'medium', 'long')),
        review_at TEXT,
        last_accessed_at TEXT,
        access_count INTEGER NOT NULL DEFAULT 0,
        pinned INTEGER NOT NULL DEFAULT 0,
        source_chat_id INTEGER,
        source_message_id INTEGER,
        source_at TEXT,
        superseded_by INTEGER,
        status_reason TEXT NOT NULL DEFAULT '',
        fingerprint TEXT NOT NULL DEFAULT ''
    )"""
V3_TABLE = 'CREATE TABLE IF NOT EXISTS "{table}" ' + V3_COLUMNS + """;
    CREATE INDEX IF NOT EXISTS "{table}_event" ON "{table}" (event)
"""
# The table as the steps leave it now: v3 without the text index (0004), without CHECK constraints and
# DEFAULTs (0005). New tables are created from this in one statement (SQLite re-parses its schema after
# every ALTER TABLE: ~300 ms for a new user at 10,000 tables), on one line: SQLite keeps the text as
# written and reads all of it at every start. A step that adds a column gives this its own column list;
# ``tests/test_migrations.py`` checks it equals what the steps build.
V5_COLUMNS = (
    "(id INTEGER PRIMARY KEY, event TEXT NOT NULL, keywords TEXT NOT NULL, importance REAL NOT NULL, "
    "created_at TEXT NOT NULL, validity TEXT NOT NULL, last_mentioned_at TEXT, updated_at TEXT NOT NULL, "
    "expires_at TEXT, type TEXT NOT NULL, origin TEXT NOT NULL, mention_count INTEGER NOT NULL, "
    "last_decay_at TEXT NOT NULL, terms TEXT NOT NULL, status TEXT NOT NULL, tier TEXT NOT NULL, review_at TEXT, "
    "last_accessed_at TEXT, access_count INTEGER NOT NULL, pinned INTEGER NOT NULL, source_chat_id INTEGER, "
    "source_message_id INTEGER, source_at TEXT, superseded_by INTEGER, status_reason TEXT NOT NULL, "
    "fingerprint TEXT NOT NULL)"
)
# v6 adds when a memory happens (``core.dates``' ISO 8601 text), nullable and last, as ALTER TABLE would.
LEAN_COLUMNS = V5_COLUMNS[:-1] + ", happens TEXT)"
CURRENT_TABLE = 'CREATE TABLE IF NOT EXISTS "{table}" ' + LEAN_COLUMNS
_LEAN_SQL = 'CREATE TABLE "{table}" ' + LEAN_COLUMNS  # as SQLite stores it (without IF NOT EXISTS)
_V5_SQL = 'CREATE TABLE "{table}" ' + V5_COLUMNS


def _shape(sql: str) -> list[tuple[object, ...]]:
    """Columns as the file stores them (name, type, not null, key), defaults and constraints aside."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(sql.format(table="t"))
        return [(c[1], c[2], c[3], c[5]) for c in conn.execute('PRAGMA table_info("t")')]
    finally:
        conn.close()


async def _lean_table_sql(conn: aiosqlite.Connection, tables: Sequence[str]) -> None:
    """v5: the tables' SQL without CHECK constraints and DEFAULTs. Neither changes how rows are stored,
    so the stored SQL is rewritten in place (SQLite's documented procedure for such changes, "ALTER TABLE",
    section 7) instead of copying every row; after checking that each table stores exactly the columns
    the new SQL declares. One call for many tables: SQLite re-reads the whole schema once per rewrite. A
    table this step is due on has every later step due too, so it is given the current SQL at once (v6's
    nullable column included, which needs no change to the rows either): one rewrite, one schema re-read."""
    await _rewrite_table_sql(conn, tables, _V5_SQL, _LEAN_SQL)


async def _happens_column(conn: aiosqlite.Connection, tables: Sequence[str]) -> None:
    """v6: the ``happens`` column, nullable, at the end. That is what ALTER TABLE ADD COLUMN writes (the rows
    stay as they are and read NULL for it), done as one rewrite of the stored SQL for all the tables instead
    of one schema re-parse per table; a table whose columns are not v5's gets the ALTER TABLE itself."""
    odd = await _rewrite_table_sql(conn, tables, _V5_SQL, _LEAN_SQL, warn=False)
    for table in odd:
        cursor = await conn.execute(f'SELECT 1 FROM pragma_table_info("{table}") WHERE name = \'happens\'')
        if await cursor.fetchone() is None:
            await conn.execute(f'ALTER TABLE "{table}" ADD COLUMN happens TEXT')


async def _rewrite_table_sql(
    conn: aiosqlite.Connection, tables: Sequence[str], was: str, new: str, *, warn: bool = True,
) -> list[str]:
    """Set the stored SQL of ``tables`` whose columns are those of ``was`` to ``new``; returns the others."""
    if not tables:
        return []
    wanted = set(tables)
    expected = _shape(was)
    cursor = await conn.execute(
        "SELECT m.rowid, m.name, p.name, p.type, p.\"notnull\", p.pk FROM sqlite_schema AS m, "
        "pragma_table_info(m.name) AS p WHERE m.type = 'table' AND m.name IN (SELECT value FROM json_each(?)) "
        "ORDER BY m.rowid, p.cid", (json.dumps(list(wanted)),))
    shapes: dict[str, tuple[int, list[tuple[object, ...]]]] = {}
    for rowid, table, *column in await cursor.fetchall():
        shapes.setdefault(table, (int(rowid), []))[1].append(tuple(column))
    odd = [table for table in tables if table not in shapes or shapes[table][1] != expected]
    if odd and warn:  # changed by hand? Its SQL stays as it is: the code still reads it, it only costs memory
        log.warning("%d memory table(s) have other columns than expected, SQL left as it is: %s", len(odd),
                    ", ".join(odd[:5]))
    tables = [table for table in tables if table not in odd]
    if not tables:
        return odd
    cursor = await conn.execute("PRAGMA schema_version")
    row = await cursor.fetchone()
    version = int(row[0]) if row else 0
    await conn.execute("PRAGMA writable_schema = ON")
    try:
        await conn.executemany("UPDATE sqlite_schema SET sql = ? WHERE rowid = ?",
                               [(new.format(table=table), shapes[table][0]) for table in tables])
        # Every connection (this one too) re-reads the schema when the version moves.
        await conn.execute(f"PRAGMA schema_version = {version + 1}")
    finally:
        await conn.execute("PRAGMA writable_schema = OFF")
    return odd


async def _handles_and_lifecycle(conn: aiosqlite.Connection, key: str, table: str) -> None:
    """v3: ids become database-wide handles, ``source`` becomes ``origin``, and the life-cycle columns
    arrive. Rebuilds the table (a primary key cannot be renumbered in place); the ids move by one offset
    so their order, and everything else, is kept."""
    cursor = await conn.execute("SELECT COALESCE(max(id), 0) FROM memory_handles")
    row = await cursor.fetchone()
    base = int(row[0]) if row else 0
    new = f"{table}__v3"
    await conn.execute(f'INSERT INTO memory_handles (id, scope_key) SELECT id + ?, ? FROM "{table}" ORDER BY id',
                       (base, key))
    await run_script(conn, V3_TABLE.format(table=new).replace(f'"{new}_event"', f'"{new}_event_tmp"'))
    await conn.execute(
        f'INSERT INTO "{new}" (id, event, keywords, importance, created_at, validity, last_mentioned_at, '
        "updated_at, expires_at, type, origin, mention_count, last_decay_at, terms, status, tier) "
        "SELECT id + ?, event, keywords, importance, created_at, validity, last_mentioned_at, updated_at, "
        "expires_at, type, CASE source WHEN 'extraction' THEN 'extracted' WHEN 'manual' THEN 'explicit' "
        "ELSE 'restore' END, mention_count, last_decay_at, terms, 'active', "
        "CASE validity WHEN 'permanent' THEN 'long' WHEN '30d' THEN 'medium' ELSE 'short' END "
        f'FROM "{table}"',
        (base,),
    )
    await conn.execute(f'DROP TABLE "{table}"')
    await conn.execute(f'DROP INDEX "{new}_event_tmp"')
    await conn.execute(f'ALTER TABLE "{new}" RENAME TO "{table}"')
    await conn.execute(f'CREATE INDEX IF NOT EXISTS "{table}_event" ON "{table}" (event)')


MEMORIES = MigrationSet("memories", (
    Migration("0001_create", """
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
    CREATE INDEX IF NOT EXISTS "{table}_event" ON "{table}" (event)
    """),
    # The event's words for the recall index ('' = not computed yet; the index segments it then).
    Migration("0002_terms", """
    ALTER TABLE "{table}" ADD COLUMN terms TEXT NOT NULL DEFAULT ''
    """),
    Migration("0003_handles_and_lifecycle", run=_handles_and_lifecycle),
    # One schema entry per user instead of two: SQLite reads its whole schema at start-up and scans it on
    # every CREATE TABLE, so each entry per user costs every start and every new user. The index served
    # only cleanup's duplicate check, which now finds duplicates by grouping (``decay.CLEAN``).
    Migration("0004_drop_event_index", """
    DROP INDEX IF EXISTS "{table}_event"
    """),
    # SQLite keeps every table's parsed schema in each connection: at 10,000 users the CHECK constraints
    # and DEFAULTs were 32 of its 50 MB. They guard nothing the code does not: the row codecs validate
    # every value and every INSERT names every column (``rows.INSERT_MEMORY``).
    Migration("0005_lean_table_sql", run_many=_lean_table_sql),
    Migration("0006_happens", run_many=_happens_column),
))
CURRENT_TABLE_VERSION = len(MEMORIES.steps)
LIFECYCLE_VERSION = MEMORIES.names.index("0003_handles_and_lifecycle") + 1  # tables with ``status``


async def create_memory_table(conn: aiosqlite.Connection, table: str, *, key: str | None = None) -> None:
    """A new scope's table, at the current version in one statement; with ``key``, that version is also
    recorded on the scope's row (one registered without it)."""
    await run_script(conn, CURRENT_TABLE.format(table=table))
    if key is not None:
        await conn.execute("UPDATE scopes SET table_version = ? WHERE key = ?", (CURRENT_TABLE_VERSION, key))


async def upgrade_memory_table(conn: aiosqlite.Connection, key: str, table: str, version: int) -> int:
    """Run the per-scope steps after ``version`` on one table; returns the new version."""
    await upgrade_memory_tables(conn, [(key, table, version)])
    return CURRENT_TABLE_VERSION


async def upgrade_memory_tables(conn: aiosqlite.Connection, tables: Sequence[tuple[str, str, int]]) -> None:
    """Bring tables (scope key, table, version) to the current version, in step order; a ``run_many``
    step runs once for all the tables it is due on."""
    for number, step in enumerate(MEMORIES.steps):
        due = [(key, table) for key, table, version in tables if version <= number]
        if not due:
            continue
        if step.run_many is not None:
            await step.run_many(conn, [table for _, table in due])
            continue
        for key, table in due:
            if step.run is not None:
                await step.run(conn, key, table)
            else:
                await run_script(conn, step.script.format(table=table))
    upgraded = [(CURRENT_TABLE_VERSION, key) for key, _, version in tables if version < CURRENT_TABLE_VERSION]
    await conn.executemany("UPDATE scopes SET table_version = ? WHERE key = ?", upgraded)


def bulk_from(version: int) -> bool:
    """Whether every step after ``version`` runs for many tables in one call (then any number of tables
    at that version upgrade in one short transaction)."""
    return all(step.run_many is not None for step in MEMORIES.steps[version:])
