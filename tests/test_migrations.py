"""Named, append-only migrations: a database from the first release upgrades without losing anything,
database-wide steps run once at open, per-scope steps only when a scope is touched or in background
batches, and a new table built in one statement equals one built step by step."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
import pytest

from companion.core.models import Origin, Scope, Status, Tier, Validity
from companion.core.setting import (
    GROUP_MEMORY,
    LAST_DECAY_AT,
    LAST_EXTRACTION,
    MOVED_TO,
    REVIEW_SENT,
    SHARE_PRIVATE,
    WEEKLY,
    WEEKLY_SENT,
)
from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.sqlite import SQLiteStore, migrations
from companion.storage.sqlite.migrations import CORE, MEMORIES

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ALICE, BOB = Scope(101), Scope(202)

# What the first release wrote: the core script under PRAGMA user_version = 1, memory tables at v2.
V1_ROWS = {
    ALICE: [(1, "2025-12-20 感冒发烧", "感冒,发烧", 80.0, "permanent", "extraction"),
            (2, "喜欢奶茶", "奶茶", 60.5, "30d", "manual")],
    BOB: [(1, "要搬家", "搬家", 70.0, "7d", "import")],
}


def make_v1_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(CORE.steps[0].script)
        conn.execute("PRAGMA user_version = 1")
        for scope, rows in V1_ROWS.items():
            table = scope.table
            conn.execute("INSERT INTO scopes (key, user_id, chat_id, table_version, active, created_at) "
                         "VALUES (?, ?, NULL, 2, 1, '2025-12-01T00:00:00Z')", (scope.key, scope.user_id))
            conn.executescript(MEMORIES.steps[0].script.format(table=table))
            conn.executescript(MEMORIES.steps[1].script.format(table=table))
            for mid, event, keywords, importance, validity, source in rows:
                conn.execute(
                    f'INSERT INTO "{table}" (id, event, keywords, importance, created_at, validity, updated_at, '
                    "type, source, mention_count, last_decay_at, terms) VALUES "
                    "(?, ?, ?, ?, '2025-12-20T02:00:00Z', ?, '2025-12-20T02:00:00Z', 'event', ?, 3, "
                    "'2025-12-21T02:00:00Z', '')",
                    (mid, event, keywords, importance, validity, source),
                )
        conn.execute("INSERT INTO pending_turns (scope_key, user_text, reply_text, created_at) "
                     "VALUES ('u101', '还在咳嗽', NULL, '2025-12-22T02:00:00Z')")
        conn.commit()
    finally:
        conn.close()


def versions(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {str(k): int(v) for k, v in conn.execute("SELECT key, table_version FROM scopes")}
    finally:
        conn.close()


def applied(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return [(str(o), str(n)) for o, n in conn.execute("SELECT owner, name FROM migrations ORDER BY owner, name")]
    finally:
        conn.close()


async def test_a_first_release_database_upgrades_lazily_and_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    make_v1_database(path)
    store = await SQLiteStore.open(path)
    try:
        # Opening ran only the database-wide steps; no memory table was touched.
        assert applied(path) == sorted((s.owner, name) for s in migrations.SHARED_SETS for name in s.names)
        assert versions(path) == {"u101": 2, "u202": 2}
        assert await store.active_scopes() == {ALICE, BOB}
        assert [t.user for t in await store.pending_turns(ALICE, 10)] == ["还在咳嗽"]

        alice = await store.fetch_memories(ALICE)  # touching a scope upgrades its table
        assert versions(path) == {"u101": migrations.CURRENT_TABLE_VERSION, "u202": 2}
        assert [(m.event, m.keywords, m.importance, m.validity, m.origin, m.tier, m.mention_count)
                for m in alice] == [
            ("2025-12-20 感冒发烧", ["感冒", "发烧"], 80.0, Validity.PERMANENT, Origin.EXTRACTED, Tier.LONG, 3),
            ("喜欢奶茶", ["奶茶"], 60.5, Validity.DAYS_30, Origin.EXPLICIT, Tier.MEDIUM, 3),
        ]
        assert all(m.status is Status.ACTIVE for m in alice)

        assert await store.upgrade_stale(limit=10) == 0  # the background batch does the rest
        assert versions(path) == {"u101": migrations.CURRENT_TABLE_VERSION, "u202": migrations.CURRENT_TABLE_VERSION}
        [bob] = await store.fetch_memories(BOB)
        assert (bob.event, bob.origin, bob.tier) == ("要搬家", Origin.RESTORE, Tier.SHORT)

        # Per-user ids became database-wide handles, in their old order, each owned by its scope.
        handles = [m.id for m in alice] + [bob.id]
        assert len(set(handles)) == 3 and handles[0] < handles[1]
        assert [await store.owner_of(h) for h in handles] == [ALICE, ALICE, BOB]
    finally:
        await store.close()

    again = await SQLiteStore.open(path)  # a second open runs nothing again
    try:
        assert len(await again.fetch_memories(ALICE)) == 2
        assert applied(path) == sorted((s.owner, name) for s in migrations.SHARED_SETS for name in s.names)
    finally:
        await again.close()


async def test_new_steps_run_once_on_old_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "memory.sqlite3"
    old = await SQLiteStore.open(path)
    await old.apply_changes(ALICE, NOW, inserts=[])
    await old.set_active(ALICE, True, NOW)
    await old.close()

    extra_core = MigrationSet("core", (*CORE.steps, Migration("9001_extra", "CREATE TABLE extra (x INTEGER)")))
    sync = MigrationSet("sync", (Migration("0001_state", "CREATE TABLE sync_state (k TEXT)"),))
    monkeypatch.setattr(migrations, "SHARED_SETS", (extra_core, sync))
    monkeypatch.setattr(migrations, "MEMORIES", MigrationSet("memories", (
        *MEMORIES.steps, Migration("9001_note", 'ALTER TABLE "{table}" ADD COLUMN note TEXT'))))
    monkeypatch.setattr(migrations, "CURRENT_TABLE_VERSION", len(MEMORIES.steps) + 1)
    for _ in range(2):  # the second open must not re-run the new steps ("duplicate column", "table exists")
        store = await SQLiteStore.open(path)
        await store.fetch_memories(ALICE)
        await store.close()
    assert ("core", "9001_extra") in applied(path) and ("sync", "0001_state") in applied(path)
    conn = sqlite3.connect(path)
    try:
        columns = [r[1] for r in conn.execute(f'PRAGMA table_info("{ALICE.table}")')]
    finally:
        conn.close()
    assert columns[-1] == "note"
    assert versions(path) == {ALICE.key: len(MEMORIES.steps) + 1}


async def test_an_upgraded_database_keeps_its_settings(tmp_path: Path) -> None:
    """The ``meta`` keys of the release before typed settings move to ``settings`` with their values."""
    path = tmp_path / "memory.sqlite3"
    before = CORE.names.index("0007_settings")
    async with aiosqlite.connect(path) as old:
        await old.execute("BEGIN")
        await migrations.migrate_shared(old, "2025-12-01T00:00:00Z", [
            MigrationSet("core", CORE.steps[:before]), *(s for s in migrations.SHARED_SETS if s.owner != "core")])
        group = Scope(101, -5)
        await old.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
            ("group_memory:-5", "off"), ("share_private:101", "on"), ("moved:-5:to", "-1000000000005"),
            ("last_decay_at", "2025-12-22T03:00:00Z"), (f"weekly:{ALICE.key}", "on"),
            (f"review_sent:{group.key}", "2025-12-21T03:00:00Z"), (f"weekly_sent:{ALICE.key}", "2025-12-20T03:00:00Z"),
            (f"last_extraction:{ALICE.key}", "2025-12-22T02:00:00Z"), ("something_else", "kept")])
        await old.commit()
    store = await SQLiteStore.open(path)
    try:
        assert await store.get_setting(GROUP_MEMORY, -5) is False
        assert await store.get_setting(SHARE_PRIVATE, 101) is True
        assert await store.get_setting(MOVED_TO, -5) == -1000000000005
        assert await store.get_setting(LAST_DECAY_AT, None) == datetime(2025, 12, 22, 3, 0, tzinfo=UTC)
        assert await store.get_setting(WEEKLY, ALICE) is True
        assert await store.get_setting(REVIEW_SENT, group) == datetime(2025, 12, 21, 3, 0, tzinfo=UTC)
        assert await store.get_setting(WEEKLY_SENT, ALICE) == datetime(2025, 12, 20, 3, 0, tzinfo=UTC)
        assert await store.get_setting(LAST_EXTRACTION, ALICE) == datetime(2025, 12, 22, 2, 0, tzinfo=UTC)
        assert await store.change_counter(ALICE) == 0  # the journal starts empty
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT key, value FROM meta").fetchall() == [("something_else", "kept")]
    finally:
        conn.close()


def test_shipped_step_names_never_change() -> None:
    """Append-only: a shipped step keeps its name and place; new ones go at the end."""
    assert CORE.names[:3] == ("0001_initial", "0002_memory_handles", "0003_turn_source")
    assert MEMORIES.names[:3] == ("0001_create", "0002_terms", "0003_handles_and_lifecycle")
    assert len(MEMORIES.steps) == migrations.CURRENT_TABLE_VERSION


async def test_a_new_table_equals_one_built_by_every_step(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "shape.sqlite3") as conn:
        await migrations.migrate_shared(conn, "2025-12-23T04:00:00Z")
        for key in ("u1", "u2"):
            await conn.execute("INSERT INTO scopes (key, user_id, created_at) VALUES (?, 1, 'x')", (key,))
        await migrations.create_memory_table(conn, "mem_u1", key="u1")
        await migrations.upgrade_memory_table(conn, "u2", "mem_u2", 0)
        shapes = []
        for table in ("mem_u1", "mem_u2"):
            cursor = await conn.execute(f'PRAGMA table_info("{table}")')
            columns = [tuple(c[1:]) for c in await cursor.fetchall()]
            cursor = await conn.execute(f'PRAGMA index_list("{table}")')
            indexes = sorted(str(i[1]).replace(table, "T") for i in await cursor.fetchall())
            shapes.append((columns, indexes))
    assert shapes[0] == shapes[1]
    assert shapes[0][1] == []  # one schema entry per user: no per-table index


async def test_start_up_reads_no_memory_table(tmp_path: Path) -> None:
    """Opening costs one query over the scope registry however many users there are: a broken memory
    table of one user does not even stop the store from opening, only that user's reads fail."""
    path = tmp_path / "memory.sqlite3"
    store = await SQLiteStore.open(path)
    for n in range(1, 6):
        await store.set_active(Scope(n), True, NOW)
    await store.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("UPDATE scopes SET table_version = 2 WHERE key = 'u3'")  # pretend u3 is old
        conn.commit()
    finally:
        conn.close()
    store = await SQLiteStore.open(path)
    try:
        assert len(await store.active_scopes()) == 5
        assert versions(path)["u3"] == 2
    finally:
        await store.close()


# What step 0004 left: the v3 columns with their CHECK constraints and DEFAULTs, on one line.
V4_TABLE = 'CREATE TABLE IF NOT EXISTS "{table}" ' + " ".join(migrations.V3_COLUMNS.split())


def table_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return {str(n): str(s) for n, s in conn.execute(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name GLOB 'mem_u*'")}
    finally:
        conn.close()


async def make_v4_database(path: Path, users: int) -> list[Scope]:
    """Tables as the 0004 release created them, each with one memory."""
    store = await SQLiteStore.open(path)
    scopes = [Scope(n) for n in range(1, users + 1)]
    try:
        async with store.transaction() as conn:
            for scope in scopes:
                await conn.execute("INSERT INTO scopes (key, user_id, table_version, created_at) VALUES (?, ?, 4, 'x')",
                                   (scope.key, scope.user_id))
                await conn.execute(V4_TABLE.format(table=scope.table))
    finally:
        await store.close()
    store = await SQLiteStore.open(path)
    try:
        for scope in scopes:
            # The store upgrades a table it writes to: write through plain SQL instead, as the old code did.
            async with store.transaction() as conn:
                await conn.execute(
                    f'INSERT INTO "{scope.table}" (id, event, keywords, importance, created_at, validity, updated_at, '
                    "type, origin, last_decay_at, tier) VALUES (?, ?, '猫', 70, '2025-12-20T02:00:00Z', '30d', "
                    "'2025-12-20T02:00:00Z', 'event', 'extracted', '2025-12-21T02:00:00Z', 'medium')",
                    (scope.user_id * 10, f"用户{scope.user_id}养了一只猫"))
    finally:
        await store.close()
    return scopes


async def test_old_tables_lose_their_checks_and_defaults_in_one_batch(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    scopes = await make_v4_database(path, 120)
    assert all("CHECK" in sql and "DEFAULT" in sql for sql in table_sql(path).values())
    store = await SQLiteStore.open(path)
    try:
        assert await store.upgrade_stale(limit=50) == 0  # all 120 in one batch: the rewrite is per call
        for scope in scopes:
            memories = await store.fetch_memories(scope)
            assert [(m.id, m.event, m.keywords) for m in memories] == [
                (scope.user_id * 10, f"用户{scope.user_id}养了一只猫", ["猫"])]
    finally:
        await store.close()
    sqls = table_sql(path)
    assert sqls == {s.table: migrations.CURRENT_TABLE.format(table=s.table).replace(" IF NOT EXISTS", "")
                    for s in scopes}
    assert versions(path) == {s.key: migrations.CURRENT_TABLE_VERSION for s in scopes}
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()


def schema_version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA schema_version").fetchone()[0])
    finally:
        conn.close()


async def test_touching_one_old_table_rewrites_them_all_at_once(tmp_path: Path) -> None:
    """The rewrite costs a re-read of the whole schema per call: a loop over scopes (decay, backup) must
    not pay it once per table."""
    path = tmp_path / "memory.sqlite3"
    scopes = await make_v4_database(path, 30)
    before = schema_version(path)
    store = await SQLiteStore.open(path)
    try:
        assert len(await store.fetch_memories(scopes[1])) == 1
        await store.decay_and_clean(scopes, NOW)
        assert await store.upgrade_stale() == 0
    finally:
        await store.close()
    assert all("CHECK" not in sql for sql in table_sql(path).values())
    assert set(versions(path).values()) == {migrations.CURRENT_TABLE_VERSION}
    assert schema_version(path) == before + 1


async def test_a_table_with_unexpected_columns_keeps_its_sql(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "memory.sqlite3"
    scopes = await make_v4_database(path, 3)
    conn = sqlite3.connect(path)
    try:
        conn.execute(f'ALTER TABLE "{scopes[2].table}" ADD COLUMN note TEXT')  # not a column the code knows
        conn.commit()
    finally:
        conn.close()
    before = table_sql(path)
    store = await SQLiteStore.open(path)
    try:
        assert await store.upgrade_stale() == 0
        assert len(await store.fetch_memories(scopes[2])) == 1  # still read as before
    finally:
        await store.close()
    after = table_sql(path)
    # Its SQL is left as it was but for the column the code needs, which ALTER TABLE appends.
    assert after[scopes[2].table] == before[scopes[2].table][:-1] + ", happens TEXT)"
    assert "CHECK" not in after[scopes[0].table] and "CHECK" not in after[scopes[1].table]
    assert "other columns than expected" in caplog.text and scopes[2].table in caplog.text
