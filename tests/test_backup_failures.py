"""Backups that go wrong part-way: a re-run of the day on a full disk never spoils the day's good backup,
a swap cut short is finished by the next run, one damaged table costs only its own scope, and a zero-byte
database is refused instead of being backed up as "0 users". Through ``python bot.py`` where the operator
sees it."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from companion.core.errors import BackupError
from companion.core.models import MemoryDraft, Scope
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup import nightly as backup
from companion.ops.backup.nightly import IN_PROGRESS, SNAPSHOT_NAME, make_backup
from companion.ops.backup.restore import restore
from companion.storage.sqlite import SQLiteStore
from companion.storage.sqlite.snapshot import make_standalone
from tests.process import clean_env, run_cli
from tests.test_backup_scopes import REPORT, SUPERGROUP, fill, read_every

TZ = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
DAY_NAME = "2026-11-25"
USERS = (1, 2, 3)


async def seeded(path: Path, event: str) -> SQLiteStore:
    store = await SQLiteStore.open(path)
    for uid in USERS:
        await store.apply_changes(Scope(uid), NOW, inserts=[MemoryDraft(event=f"{event}{uid}", keywords=["猫"],
                                                                         importance=70.0)])
    return store


def in_process_export(snapshot: Path, folder: Path, tz: tzinfo, now: datetime, progress: Any = None,
                      workers: int | None = None, stop: Any = None) -> backup.Exported:
    """The export in this process, so a monkeypatched writer reaches it (the real one runs in children)."""
    make_standalone(snapshot)
    return backup.export_csv(snapshot, folder, tz, now, progress)


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


async def test_a_rerun_on_a_full_disk_leaves_the_days_backup_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backups = tmp_path / "backups"
    store = await seeded(tmp_path / "live.sqlite3", "养了猫")
    try:
        first = await make_backup(MaintenancePort(store), backups, NOW, TZ, 30)
        good = files_of(first.folder)
        await store.apply_changes(Scope(1), NOW, inserts=[MemoryDraft(event="新的一条", keywords=["新"],
                                                                      importance=60.0)])
        real = backup.write_csv
        written: list[Path] = []

        def full_disk(path: Path, rows: Iterable[Sequence[object]]) -> int:
            written.append(path)
            if len(written) == 2:  # the second file of the re-run: the disk is full
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            return real(path, rows)

        monkeypatch.setattr(backup, "write_csv", full_disk)
        monkeypatch.setattr(backup, "export_in_worker", in_process_export)
        with pytest.raises(BackupError, match="No space left on device"):
            await make_backup(MaintenancePort(store), backups, NOW, TZ, 30)
    finally:
        await store.close()
    assert len(written) == 2
    assert files_of(first.folder) == good  # untouched: no marker, no half-written file
    assert sorted(p.name for p in backups.iterdir()) == [DAY_NAME]  # the failed run freed what it wrote
    for source, name in ((first.folder, "csv"), (first.folder / SNAPSHOT_NAME, "snap")):
        result = await restore(source, tmp_path / name / "memory.sqlite3", NOW)
        assert (result.scopes, result.rows) == (3, 3)


async def test_a_rerun_replaces_the_day_when_whole(tmp_path: Path) -> None:
    backups = tmp_path / "backups"
    store = await seeded(tmp_path / "live.sqlite3", "养了猫")
    try:
        await make_backup(MaintenancePort(store), backups, NOW, TZ, 30)
        await store.apply_changes(Scope(1), NOW, inserts=[MemoryDraft(event="新的一条", keywords=["新"],
                                                                      importance=60.0)])
        second = await make_backup(MaintenancePort(store), backups, NOW, TZ, 30)
    finally:
        await store.close()
    assert (second.files, second.rows) == (3, 4)
    assert sorted(p.name for p in backups.iterdir()) == [DAY_NAME]
    assert not (second.folder / IN_PROGRESS).exists()
    result = await restore(second.folder, tmp_path / "restored.sqlite3", NOW)
    assert result.rows == 4


@pytest.mark.parametrize("new_written", [False, True], ids=["killed-before-the-new-took-its-place", "killed-after"])
def test_a_swap_cut_short_is_finished_by_the_next_run(tmp_path: Path, new_written: bool) -> None:
    """Killed between moving the old day aside and removing it: the day is never left without a backup."""
    old = backup.replaced_folder(tmp_path, DAY_NAME)
    old.mkdir()
    (old / SNAPSHOT_NAME).write_bytes(b"old")
    staging = backup.staging_folder(tmp_path, DAY_NAME)
    staging.mkdir()
    (staging / IN_PROGRESS).write_text("started\n")
    if new_written:
        (tmp_path / DAY_NAME).mkdir()
        (tmp_path / DAY_NAME / SNAPSHOT_NAME).write_bytes(b"new")
    (tmp_path / ".2026-11-24.partial").mkdir()  # a day before, killed at 23:59
    (tmp_path / ".notes").mkdir()  # not a backup's: left alone
    backup.recover(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes", DAY_NAME]
    assert (tmp_path / DAY_NAME / SNAPSHOT_NAME).read_bytes() == (b"new" if new_written else b"old")


class Killed(BaseException):
    """A kill -9 part-way through removing files (BaseException: nothing may catch it)."""


@pytest.mark.parametrize("after", [0, 1, 2, 3])
def test_a_backup_removed_part_way_is_left_marked_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: int
) -> None:
    """The previous backup being removed after a swap, or an old one pruned: a kill after any file leaves either
    nothing or a folder marked unfinished, never one that looks whole with files missing (restore would take it)."""
    folder = tmp_path / "2026-11-20"
    folder.mkdir()
    for name in (SNAPSHOT_NAME, "u1.csv", "u2.csv", "report.txt"):
        (folder / name).write_text(name)
    removed = 0
    unlink = Path.unlink

    def dying(path: Path, missing_ok: bool = False) -> None:
        nonlocal removed
        if removed == after:
            raise Killed
        removed += 1
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", dying)
    with pytest.raises(Killed):
        backup.discard(folder)
    monkeypatch.undo()
    assert (folder / IN_PROGRESS).exists()
    backup.discard(folder)  # the next run finishes it
    assert not folder.exists()


def damage_table(db: Path, table: str) -> None:
    """Overwrite the root page of one table with garbage, as a bad sector would."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        root = int(conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0])
    finally:
        conn.close()
    with db.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\x0d\xff" * (page_size // 2))


async def test_one_damaged_table_costs_only_its_own_scope(tmp_path: Path) -> None:
    live = tmp_path / "live.sqlite3"
    store = await seeded(live, "养了猫")
    table = store.memory_table(Scope(2))
    await store.close()
    damage_table(live, table)
    store = await SQLiteStore.open(live)
    try:
        result = await make_backup(MaintenancePort(store), tmp_path / "backups", NOW, TZ, 30)
    finally:
        await store.close()
    assert (result.files, result.rows) == (2, 2)
    assert len(result.damaged) == 1 and result.damaged[0].startswith("u2: ")
    assert sorted(p.name for p in result.folder.iterdir()) == [SNAPSHOT_NAME, "u1.csv", "u3.csv"]  # no .tmp


def cli_env(tmp: Path, data: str = "data") -> dict[str, str]:
    env = clean_env()
    env.update(DATA_DIR=str(tmp / data), BACKUP_DIR=str(tmp / "backups"), TIMEZONE="Asia/Shanghai")
    return env


async def test_the_backup_command_names_a_damaged_scope_and_fails(tmp_path: Path) -> None:
    live = tmp_path / "data" / "memory.sqlite3"
    store = await seeded(live, "养了猫")
    table = store.memory_table(Scope(2))
    await store.close()
    damage_table(live, table)
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "backup")
    assert code == 1, out + err
    assert "3 users in 3 scopes, 2 memories" in out
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "1 scopes could not be read" in line and "u2: " in line


async def test_a_zero_byte_database_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "memory.sqlite3").write_bytes(b"")
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "backup")
    assert code == 1, out + err
    assert err.strip().splitlines() == [f"error: the database at {tmp_path / 'data' / 'memory.sqlite3'} is an empty "
                                        "file (0 bytes); nothing to back up"]
    assert not (tmp_path / "backups").exists() or not list((tmp_path / "backups").iterdir())
    assert (tmp_path / "data" / "memory.sqlite3").stat().st_size == 0


async def test_the_commands_back_up_and_restore_group_memories(tmp_path: Path) -> None:
    """The report through the operator's commands: ``restore backups/DAY`` into an empty data folder."""
    await fill(tmp_path / "data" / "memory.sqlite3", REPORT)
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "backup")
    assert code == 0, out + err
    (day,) = [p for p in (tmp_path / "backups").iterdir()]
    for name, source in (("fresh", day), ("fresh2", day / SNAPSHOT_NAME)):
        code, out, err = await run_cli(cli_env(tmp_path, name), tmp_path, "restore", str(source))
        assert code == 0, out + err
        assert "restored 6 memories and 2 tombstones of 2 users in 3 scopes" in out
        assert await read_every(tmp_path / name / "memory.sqlite3") == REPORT


async def test_backup_counts_users_and_scopes_as_users_does(tmp_path: Path) -> None:
    await fill(tmp_path / "data" / "memory.sqlite3", REPORT)
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "backup")
    assert code == 0, out + err
    assert ": 2 users in 3 scopes, " in out


async def test_memories_of_a_user_with_only_group_memories_names_the_group_scopes(tmp_path: Path) -> None:
    await fill(tmp_path / "data" / "memory.sqlite3", REPORT)
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "memories", "1004")
    assert code == 0, out + err
    first, hint = out.strip().splitlines()
    assert first == "no memories for user 1004 in their private chat"
    assert f"--chat {SUPERGROUP} (1 active)" in hint and "memories 1004 --chat CHAT_ID" in hint
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "memories", "1004", "--chat", str(SUPERGROUP))
    assert code == 0, out + err
    assert "喜欢喝奶茶" in out


async def test_a_failed_restore_prints_its_error_on_a_line_of_its_own(tmp_path: Path) -> None:
    await fill(tmp_path / "data" / "memory.sqlite3", REPORT)
    code, out, err = await run_cli(cli_env(tmp_path), tmp_path, "backup")
    assert code == 0, out + err
    (day,) = [p for p in (tmp_path / "backups").iterdir()]
    last = sorted(day.glob("*.csv"))[-1]  # read after the others have reported progress
    last.write_text(last.read_text(encoding="utf-8-sig") + "not,a,row\n", encoding="utf-8-sig")
    code, out, err = await run_cli(cli_env(tmp_path, "fresh"), tmp_path, "restore", str(day))
    assert code == 1, out + err
    lines = err.split("\n")
    assert "restore: 1/3" in err
    (line,) = [x for x in lines if "error:" in x]
    assert line.startswith("error:") and last.name in line


async def test_a_restore_without_force_refuses_before_reading_a_row(tmp_path: Path) -> None:
    """The refusal that costs nothing comes first: the backup is not read (100,000 memories take seconds)."""
    from companion.core.errors import RestoreError
    from tests.test_backup_scopes import backup_of

    folder = await backup_of(tmp_path / "made", REPORT)
    live = tmp_path / "data" / "memory.sqlite3"
    await fill(live, REPORT)
    read: list[tuple[int, int]] = []
    with pytest.raises(RestoreError, match="add --force"):
        await restore(folder, live, datetime(2026, 12, 5, tzinfo=UTC), progress=lambda d, t: read.append((d, t)))
    assert read == [], "the backup was read before the refusal"
    assert await read_every(live) == REPORT
