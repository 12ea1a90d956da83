"""Spare memory tables: a new scope takes one made ahead instead of running CREATE TABLE on its first write;
the pool refills in the background; every reader (store, snapshot, backup, decay, chat move) finds the
taken table; a race with another process, a rollback and an old spare all end with no memory misplaced."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.core.cells import CellColumn, CellKind
from companion.core.errors import StorageError
from companion.core.models import MemoryDraft, Scope, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import make_backup
from companion.storage.sqlite import SQLiteStore, migrations, spares
from companion.storage.sqlite.snapshot import open_snapshot
from tests.support import table_of

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ALICE, BOB, CAROL = Scope(101), Scope(202), Scope(303)
GROUP = -1001234567890


def draft(event: str) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=[event[:2]], importance=80.0, validity=Validity.DAYS_30)


def ask(db: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return [tuple(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def table_names(db: Path) -> set[str]:
    return {str(r[0]) for r in ask(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def table(db: Path, scope: Scope) -> str | None:
    conn = sqlite3.connect(db)
    try:
        return table_of(conn, scope.key)
    finally:
        conn.close()


async def spares_ready(db: Path, count: int = spares.SPARE_TABLES) -> list[int]:
    for _ in range(400):
        ids = [int(str(r[0])) for r in ask(db, "SELECT id FROM spare_tables ORDER BY id")]
        if len(ids) >= count:
            return ids
        await asyncio.sleep(0.01)
    raise AssertionError(f"fewer than {count} spare tables were made")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(tmp_path / "memory.sqlite3")
    yield opened
    await opened.close()


async def test_a_new_scope_takes_a_spare_and_the_pool_refills(store: SQLiteStore) -> None:
    db = store.path
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    assert table(db, ALICE) == ALICE.table  # no spare yet: the first scope makes its own
    first = await spares_ready(db)
    await store.apply_changes(BOB, NOW, inserts=[draft("养了一只猫")])
    assert table(db, BOB) == spares.spare_name(first[0])
    assert BOB.table not in table_names(db)  # its first write ran no CREATE TABLE
    assert [m.event for m in await store.fetch_memories(BOB)] == ["养了一只猫"]
    assert [m.event for m in await store.fetch_memories(ALICE)] == ["爱吃火锅"]
    refilled = await spares_ready(db)
    assert first[0] not in refilled and len(refilled) == spares.SPARE_TABLES


async def test_a_taken_spare_is_found_after_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    store = await SQLiteStore.open(db)
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    await spares_ready(db)
    await store.apply_changes(BOB, NOW, inserts=[draft("养了一只猫")])
    await store.close()
    again = await SQLiteStore.open(db)
    try:
        assert [m.event for m in await again.fetch_memories(BOB)] == ["养了一只猫"]
        assert await again.count_memories() == 2
        await again.apply_changes(BOB, NOW, inserts=[draft("猫叫咪咪")])
        assert sorted(str(r[0]) for r in ask(db, f'SELECT event FROM "{table(db, BOB)}"')) == ["养了一只猫", "猫叫咪咪"]
    finally:
        await again.close()


async def test_a_spare_taken_by_another_process_is_not_shared(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    one = await SQLiteStore.open(db)
    await one.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    ready = await spares_ready(db)
    other = await SQLiteStore.open(db, spare_tables=0)  # reads the same list of spares at open
    try:
        await other.apply_changes(BOB, NOW, inserts=[draft("养了一只猫")])
        assert table(db, BOB) == spares.spare_name(ready[0])
        # ``one`` still lists that spare; taking it fails and CAROL gets a table of her own.
        await one.apply_changes(CAROL, NOW, inserts=[draft("在学钢琴")])
        assert table(db, CAROL) == CAROL.table
        assert [m.event for m in await one.fetch_memories(CAROL)] == ["在学钢琴"]
        assert [m.event for m in await other.fetch_memories(BOB)] == ["养了一只猫"]
        assert ask(db, f'SELECT event FROM "{spares.spare_name(ready[0])}"') == [("养了一只猫",)]
    finally:
        await other.close()
        await one.close()


async def test_a_rolled_back_first_write_keeps_the_spare_and_registers_nothing(store: SQLiteStore) -> None:
    db = store.path
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    ready = await spares_ready(db)

    [alices] = await store.fetch_memories(ALICE)
    with pytest.raises(StorageError):  # registers BOB with a spare, then fails on a handle in use
        await store.import_rows(BOB, [alices], NOW, keep_ids=True)
    assert ask(db, "SELECT key FROM scopes ORDER BY key") == [(ALICE.key,)]
    assert [int(str(r[0])) for r in ask(db, "SELECT id FROM spare_tables ORDER BY id")] == ready
    assert await store.fetch_memories(BOB) == []
    await store.apply_changes(BOB, NOW, inserts=[draft("养了一只猫")])
    assert table(db, BOB) in {spares.spare_name(i) for i in ready}
    assert [m.event for m in await store.fetch_memories(BOB)] == ["养了一只猫"]


async def test_spares_of_an_older_version_are_dropped_not_taken(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    store = await SQLiteStore.open(db)
    await store.close()
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO spare_tables (id, version) VALUES (7, ?)", (migrations.CURRENT_TABLE_VERSION - 1,))
    conn.execute('CREATE TABLE "mem_t7" (id INTEGER PRIMARY KEY, event TEXT)')
    conn.commit()
    conn.close()
    store = await SQLiteStore.open(db)
    try:
        await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
        assert table(db, ALICE) == ALICE.table
        await spares_ready(db)
        assert "mem_t7" not in table_names(db)
        assert 7 not in [int(str(r[0])) for r in ask(db, "SELECT id FROM spare_tables")]
    finally:
        await store.close()


async def test_no_spares_when_the_target_is_zero(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    store = await SQLiteStore.open(db, spare_tables=0)
    try:
        for scope in (ALICE, BOB):
            await store.apply_changes(scope, NOW, inserts=[draft("爱吃火锅")])
        await asyncio.sleep(0.05)
        assert ask(db, "SELECT count(*) FROM spare_tables") == [(0,)]
        assert table(db, BOB) == BOB.table
    finally:
        await store.close()


async def test_close_waits_for_the_refill_and_leaves_no_half_made_spare(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    store = await SQLiteStore.open(db, spare_tables=50)
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    await asyncio.sleep(0)  # the refill has started
    await store.close()  # returns after the table being made, without making the other 49
    listed = [spares.spare_name(int(str(r[0]))) for r in ask(db, "SELECT id FROM spare_tables")]
    made = {n for n in table_names(db) if n.startswith("mem_t")}
    assert set(listed) == made and len(made) < 50


async def test_backup_decay_and_snapshot_read_a_taken_spare(store: SQLiteStore, tmp_path: Path) -> None:
    db = store.path
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    await spares_ready(db)
    await store.apply_changes(BOB, NOW, inserts=[draft("养了一只猫"), draft("猫叫咪咪")])
    assert table(db, BOB) != BOB.table
    result = await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, ZoneInfo("Asia/Shanghai"), 7)
    assert result.rows == 3
    bob_csv = (result.folder / f"{BOB.key}.csv").read_text(encoding="utf-8")
    assert "养了一只猫" in bob_csv and "猫叫咪咪" in bob_csv
    with open_snapshot(result.folder / "memory.sqlite3") as reader:
        assert reader.count() == (2, 3)
    decayed, removed = await store.decay_and_clean([ALICE, BOB], datetime(2026, 1, 10, tzinfo=UTC))
    assert decayed == 3 and removed == 0
    assert all(m.importance < 80.0 for m in await store.fetch_memories(BOB))


async def test_an_old_snapshot_without_table_ids_still_reads(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE scopes (key TEXT PRIMARY KEY, user_id INTEGER NOT NULL, chat_id INTEGER, "
        "table_version INTEGER NOT NULL DEFAULT 0, active INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL);"
        "INSERT INTO scopes (key, user_id, table_version, created_at) VALUES ('u101', 101, 5, '2025-01-01');"
        + migrations.CURRENT_TABLE.format(table="mem_u101") + ";"
        "INSERT INTO mem_u101 (id, event, keywords, importance, created_at, validity, updated_at, type, origin, "
        "mention_count, last_decay_at, terms, status, tier, access_count, pinned, status_reason, fingerprint) "
        "VALUES (1, '爱吃火锅', '火锅', 80, 'x', 'permanent', 'x', 'fact', 'extracted', 0, 'x', '', 'active', "
        "'long', 0, 0, '', '')"
    )
    conn.close()
    with open_snapshot(db) as reader:
        assert reader.count() == (1, 1)
        cells = [CellColumn("event", CellKind.TEXT)]
        assert list(reader.cell_rows(ALICE, cells, UTC, timedelta(0))) == [("爱吃火锅",)]


async def test_a_group_move_carries_a_member_whose_table_was_a_spare(store: SQLiteStore) -> None:
    db = store.path
    old, new = Scope(101, GROUP), Scope(101, GROUP - 1)
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    await spares_ready(db)
    await store.apply_changes(old, NOW, inserts=[draft("群里说在学钢琴")])
    taken = table(db, old)
    assert taken is not None and taken.startswith("mem_t")
    moved = await store.move_chat(GROUP, GROUP - 1, NOW)
    assert moved == [old]
    assert taken not in table_names(db)  # the old table went with the move
    assert [m.event for m in await store.fetch_memories(new)] == ["群里说在学钢琴"]
    assert await store.fetch_memories(old) == []


async def test_a_spare_made_meanwhile_by_another_process_is_not_made_twice(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    db = store.path
    dave = Scope(404)
    await store.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])
    ready = await spares_ready(db)  # the store expects to make max(ready) + 1 next
    clash = max(ready) + 1
    conn = sqlite3.connect(db)  # another process makes that one first
    conn.executescript(spares.make_script(clash))
    conn.close()
    await store.apply_changes(BOB, NOW, inserts=[draft("养了一只猫")])  # takes one; the refill clashes
    for _ in range(200):
        if "spare memory tables not made" in caplog.text:
            break
        await asyncio.sleep(0.01)
    assert "spare memory tables not made" in caplog.text
    await store.apply_changes(CAROL, NOW, inserts=[draft("在学钢琴")])
    await store.apply_changes(dave, NOW, inserts=[draft("下周搬家")])  # the refill read the list afresh
    await spares_ready(db, spares.SPARE_TABLES)
    tables = [table(db, scope) for scope in (ALICE, BOB, CAROL, dave)]
    assert len(set(tables)) == 4  # no two scopes share a table
    for scope, event in ((BOB, "养了一只猫"), (CAROL, "在学钢琴"), (dave, "下周搬家")):
        assert [m.event for m in await store.fetch_memories(scope)] == [event]
