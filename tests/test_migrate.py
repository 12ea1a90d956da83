"""``bot.py migrate``: a SQLite installation copied into PostgreSQL and back holds everything it held
(memories with their handles, times, statuses and tombstones, companion mode, queued turns, short-term
items, profiles, settings, usage rows, unfinished chat moves); a second run copies nothing and still
verifies; a target that differs is refused by name."""

from __future__ import annotations

import argparse
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from companion.core.errors import MigrationMismatchError, RestoreError, StorageError, UnfinishedMigrationError
from companion.core.models import MemoryDraft, Profile, Scope, ShortKind, Status, Tier, Turn, Validity
from companion.core.setting import GROUP_MEMORY, LAST_DECAY_AT, MIGRATING, WEEKLY
from companion.core.usage import UsageRecord
from companion.engine.maintenance_port import MaintenancePort
from companion.engine.migration import Copied, migrate, read_scope
from companion.ops.backup.nightly import make_backup
from companion.ops.operator_commands import run_memories, run_migrate, run_restore
from companion.storage.base import MemoryStore
from companion.storage.factory import open_store, sqlite_url
from tests.pgtest import pg_schema
from tests.support import make_settings

pytestmark = pytest.mark.postgresql

NOW = datetime(2025, 12, 23, 4, 0, 7, tzinfo=UTC)
ALICE, BOB, GROUP = Scope(101), Scope(202), Scope(101, -5)


async def fill(store: MemoryStore) -> None:
    """One of every kind of record, in a private and a group scope."""
    keep, gone, old = await store.apply_changes(ALICE, NOW, inserts=[
        MemoryDraft("喜欢火锅", ["火锅"], 70.0, validity=Validity.PERMANENT, source_chat_id=101, source_message_id=9),
        MemoryDraft("对花生过敏", ["花生"], 90.0),
        MemoryDraft("以前住在上海", ["上海"], 40.0, tier=Tier.SHORT),
    ], sources=["k1"])
    await store.apply_changes(ALICE, NOW + timedelta(hours=1), forget=[gone])
    await store.apply_changes(GROUP, NOW, inserts=[MemoryDraft("群里说要去爬山", ["爬山"], 50.0)], sources=["k3", "k4"])
    [stored] = await store.fetch_by_ids(ALICE, [old])
    await store.apply_changes(ALICE, NOW, updates=[dataclasses.replace(stored, status=Status.ARCHIVED,
                                                                       status_reason="user")])
    await store.touch(ALICE, [keep], NOW)
    await store.apply_changes(GROUP, NOW, inserts=[MemoryDraft("群里说周五聚餐", ["聚餐"], 60.0)])
    await store.set_active(ALICE, True, NOW)
    await store.set_active(BOB, False, NOW)  # a scope with nothing in it yet
    await store.add_turn(ALICE, Turn(user="今天好累", reply="抱抱", at=NOW, chat_id=101, message_id=10, key="k2"))
    await store.add_turn(GROUP, Turn(user="周五见", reply=None, at=NOW, key=None))
    await store.add_short(ALICE, ShortKind.TURN, "今天好累", "抱抱", NOW, keep=200, keys=("k2",))
    await store.add_short(ALICE, ShortKind.EVENT, "吃了感冒药", None, NOW, keep=30, recalled=True)
    await store.save_profile(ALICE, Profile(core="爱吃火锅"), NOW)
    await store.set_setting(WEEKLY, ALICE, True)
    await store.set_setting(GROUP_MEMORY, -5, False)
    await store.set_setting(LAST_DECAY_AT, None, NOW)
    await store.begin_move(-7, -1000000000007, NOW)
    usage = store.usage_log()
    assert usage is not None
    for n in range(3):
        await usage.add(UsageRecord(NOW + timedelta(seconds=n), "reply", "deepseek-chat", 100 + n, 20, 80, 20, 512.5))
    await usage.add(UsageRecord(NOW, "reply", "deepseek-chat", 100, 20, 80, 20, 512.5))  # a duplicate stays two
    await usage.add(UsageRecord(NOW, "extract", "deepseek-chat", 50, 5, None, None, 300.0, ok=False, tool_calls=1))


async def everything(store: MemoryStore) -> tuple[object, ...]:
    scopes = await store.scopes()
    active = await store.active_scopes()
    usage = store.usage_log()
    assert usage is not None
    rows = [row for _, row in await usage.page(0, 1000)]
    settings = [row for row in await store.all_settings() if row[0] != MIGRATING.name]  # each copy's own mark
    return (scopes, [await read_scope(store, s, s in active) for s in scopes], settings,
            sorted(await store.unfinished_moves()), rows)


async def test_sqlite_to_postgresql_and_back_keeps_everything(tmp_path: Path) -> None:
    original = await open_store(sqlite_url(tmp_path / "a.sqlite3"))
    await fill(original)
    async with pg_schema() as url:
        pg = await open_store(url)
        back = await open_store(sqlite_url(tmp_path / "b.sqlite3"))
        try:
            first = await migrate(original, pg, NOW)
            assert (first.scopes, first.memories, first.turns, first.short, first.profiles) == (3, 5, 2, 2, 1)
            assert (first.meta, first.usage, first.moves, first.verified_scopes) == (3, 5, 1, 3)
            again = await migrate(original, pg, NOW)
            assert dataclasses.replace(again, verified_scopes=0) == Copied()  # nothing twice
            assert again.verified_scopes == 3
            await migrate(pg, back, NOW)
            assert await everything(back) == await everything(original) == await everything(pg)
            # What forgetting follows came along: the turns each memory came from.
            [climb] = [m.id for m in await back.fetch_memories(GROUP) if m.event == "群里说要去爬山"]
            assert await back.sources_of(GROUP, [climb]) == {climb: {"k3", "k4"}}
            assert await back.sources_of(ALICE, [climb]) == {}
            # The handles go on above the copied ones in both directions.
            top = max([m.id for m in await original.fetch_memories(ALICE, set(Status))]
                      + [m.id for m in await original.fetch_memories(GROUP, set(Status))])
            for store in (pg, back):
                [fresh] = await store.apply_changes(BOB, NOW, inserts=[MemoryDraft("新的", ["新"], 50.0)])
                assert fresh > top
        finally:
            for store in (original, pg, back):
                await store.close()


async def test_a_nul_kept_by_an_older_sqlite_database_is_copied_as_every_backend_stores_it(tmp_path: Path) -> None:
    """PostgreSQL refuses NUL in text; an older version stored it in SQLite. The copy makes it U+FFFD, as text
    entering today is made, and verifies, where it used to stop half way."""
    source = await open_store(sqlite_url(tmp_path / "a.sqlite3"))
    await fill(source)
    await source.apply_changes(BOB, NOW, inserts=[MemoryDraft("对花生\x00过敏", ["花生\x00"], 80.0)])
    await source.add_turn(BOB, Turn(user="我对花生\x00过敏", reply="记\x00住了", at=NOW))
    async with pg_schema() as url:
        target = await open_store(url)
        try:
            copied = await migrate(source, target, NOW)
            assert copied.verified_scopes == 3 and copied.memories == 6
            assert [m.event for m in await target.fetch_memories(BOB)] == ["对花生\ufffd过敏"]
            [turn] = await target.pending_turns(BOB, 10)
            assert (turn.user, turn.reply) == ("我对花生\ufffd过敏", "记\ufffd住了")
        finally:
            await source.close()
            await target.close()


async def test_a_copy_cut_short_is_not_used_until_a_second_run_finishes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """All or nothing for the bot: a target holding part of a copy is refused by every engine (the bot, the
    operator's commands) with one line, until the copy is run again and verified."""
    settings = make_settings(tmp_path)
    store = await open_store(settings.database)
    await fill(store)
    await store.close()
    async with pg_schema() as url:
        await (await open_store(url)).close()  # the schema made, as the copy would make it
        # The server goes away during the copy: here, its queue table refuses the group's turn.
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("""
                CREATE FUNCTION gone() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN IF NEW.user_text = '周五见' THEN RAISE EXCEPTION 'server gone'; END IF; RETURN NEW; END $$;
                CREATE TRIGGER gone BEFORE INSERT ON pending_turns FOR EACH ROW EXECUTE FUNCTION gone();""")
            with pytest.raises(StorageError, match="server gone"):
                await run_migrate(settings, argparse.Namespace(source=None, to=url))
            on_server = make_settings(tmp_path / "elsewhere", database_url=url)
            with pytest.raises(UnfinishedMigrationError, match=r"run the same `python bot\.py migrate` again"):
                await run_memories(on_server, argparse.Namespace(user_id=101, chat=None))
            await conn.execute("DROP TRIGGER gone ON pending_turns")
        finally:
            await conn.close()
        assert await run_migrate(settings, argparse.Namespace(source=None, to=url)) == 0
        assert "verified 3 scopes" in capsys.readouterr().out
        assert await run_memories(on_server, argparse.Namespace(user_id=101, chat=None)) == 0
        assert "喜欢火锅" in capsys.readouterr().out


async def test_a_target_that_differs_is_refused_by_name(tmp_path: Path) -> None:
    source = await open_store(sqlite_url(tmp_path / "a.sqlite3"))
    await fill(source)
    async with pg_schema() as url:
        target = await open_store(url)
        try:
            await migrate(source, target, NOW)
            await target.add_short(GROUP, ShortKind.TURN, "复制之后才说的", None, NOW, keep=200)
            with pytest.raises(MigrationMismatchError, match=GROUP.key):
                await migrate(source, target, NOW)
            await target.import_rows(BOB, [dataclasses.replace((await source.fetch_memories(GROUP))[0], id=999)], NOW)
            await source.import_rows(ALICE, [dataclasses.replace((await source.fetch_memories(GROUP))[0], id=999)],
                                     NOW)
            with pytest.raises(MigrationMismatchError, match="handle 999"):
                await migrate(source, target, NOW)
        finally:
            await source.close()
            await target.close()


async def test_the_command_copies_this_installation_and_refuses_itself(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    settings = make_settings(tmp_path)
    store = await open_store(settings.database)
    await fill(store)
    await store.close()
    async with pg_schema() as url:
        assert await run_migrate(settings, argparse.Namespace(source=None, to=url)) == 0
        assert "copied 5 memories" in capsys.readouterr().out
        # The operator's commands read the server as they read the file (no file there: none is asked for).
        on_server = make_settings(tmp_path / "elsewhere", database_url=url)
        assert await run_memories(on_server, argparse.Namespace(user_id=101, chat=None)) == 0
        assert "喜欢火锅" in capsys.readouterr().out
        back = tmp_path / "back.sqlite3"
        assert await run_migrate(settings, argparse.Namespace(source=url, to=sqlite_url(back))) == 0
        assert "verified 3 scopes" in capsys.readouterr().out
    with pytest.raises(Exception, match="would copy from"):
        await run_migrate(settings, argparse.Namespace(source=None, to=settings.database))


async def test_a_postgresql_installation_backs_up_to_csv_and_restores_from_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with pg_schema() as url, pg_schema() as fresh:
        store = await open_store(url)
        try:
            await fill(store)
            result = await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, UTC, 7)
            want = {s: await store.fetch_memories(s, set(Status)) for s in await store.scopes()}
        finally:
            await store.close()
        assert result.files == 3  # one CSV per scope, the empty one too
        settings = make_settings(tmp_path / "restored", database_url=fresh)
        assert await run_restore(settings, argparse.Namespace(path=result.folder, force=False, replacing="none")) == 0
        assert "restored 4 memories and 1 tombstones" in capsys.readouterr().out
        back = await open_store(fresh)
        try:
            for scope, memories in want.items():
                got = await back.fetch_memories(scope, set(Status))
                assert [(m.id, m.event, m.status, m.importance, m.created_at) for m in got] == [
                    (m.id, m.event, m.status, m.importance, m.created_at) for m in memories]
        finally:
            await back.close()
        with pytest.raises(RestoreError, match="already holds memories"):  # a server database is not swapped
            await run_restore(settings, argparse.Namespace(path=result.folder, force=True, replacing="none"))


async def test_a_postgresql_restore_keeps_what_the_replaced_database_forgot(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Forgotten after the backup in the old database: restored into a new one, it stays forgotten (a
    content-free tombstone), while what was not forgotten comes back."""
    async with pg_schema() as old, pg_schema() as fresh:
        store = await open_store(old)
        try:
            peanut, hotpot = await store.apply_changes(ALICE, NOW, inserts=[
                MemoryDraft("对花生过敏", ["花生"], 90.0), MemoryDraft("喜欢火锅", ["火锅"], 70.0)])
            result = await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, UTC, 7)
            await store.forget_everywhere(ALICE, [peanut], NOW + timedelta(hours=1), "user")
        finally:
            await store.close()
        settings = make_settings(tmp_path / "restored", database_url=fresh)
        with pytest.raises(RestoreError, match="--replacing"):
            await run_restore(settings, argparse.Namespace(path=result.folder, force=False, replacing=None))
        assert await run_restore(settings, argparse.Namespace(path=result.folder, force=False, replacing=old)) == 0
        assert "forgot 1 memories again" in capsys.readouterr().out
        back = await open_store(fresh)
        try:
            rows = {m.id: m for m in await back.fetch_memories(ALICE, set(Status))}
            assert (rows[peanut].status, rows[peanut].event) == (Status.FORGOTTEN, "")
            assert (rows[hotpot].status, rows[hotpot].event) == (Status.ACTIVE, "喜欢火锅")
        finally:
            await back.close()
