"""A backup stopped half-way (SIGTERM during the nightly job, the start-up catch-up or ``bot.py backup``)
stops writing: its export process is killed at the next file instead of writing every CSV while the bot
waits for it, and the half-built folder keeps its in-progress marker and never takes the day's name, so
restore refuses it."""

from __future__ import annotations

import asyncio
import functools
import multiprocessing
import threading
from datetime import UTC, date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.core.errors import BackupError, RestoreError
from companion.core.models import MemoryDraft, MemoryType, Scope, Turn, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup import nightly as backup
from companion.ops.backup.nightly import IN_PROGRESS, SNAPSHOT_NAME
from companion.ops.backup.restore import restore
from companion.ops.backup.stoppable import stoppable_backup
from companion.ops.jobs import scheduled as jobs
from companion.storage.sqlite import SQLiteStore

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
USERS = 800
SETTLE_S = 0.2
STOPPED_WITHIN_S = 15


def files_in(folder: Path) -> int:
    return sum(1 for p in folder.iterdir() if p.name.endswith((".csv", ".csv.tmp"))) if folder.exists() else 0


async def test_a_cancelled_backup_stops_writing_and_stays_marked_unfinished(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "memory.sqlite3")
    for uid in range(1, USERS + 1):
        await store.add_turn(Scope(uid), Turn(user="你好", reply=None, at=NOW))
    folder = backup.staging_folder(tmp_path / "backups", "2026-11-23")  # built there, renamed when whole
    try:
        task = asyncio.create_task(stoppable_backup(MaintenancePort(store), tmp_path / "backups", NOW,
                                                    ZoneInfo("Asia/Shanghai"), 30))
        for _ in range(500):
            if files_in(folder) >= 3:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The stop is seen at the export's next file and its processes are killed; on a loaded machine that
        # can take longer than any fixed pause, so wait for them to be gone (a bounded wait: a failure).
        for _ in range(round(STOPPED_WITHIN_S / 0.05)):
            if not multiprocessing.active_children():
                break
            await asyncio.sleep(0.05)
        assert multiprocessing.active_children() == [], "the export processes outlived the stopped backup"
        settled = files_in(folder)
        await asyncio.sleep(5 * SETTLE_S)
        assert files_in(folder) == settled, "the export kept writing after the backup was stopped"
        assert settled < USERS / 2
        assert (folder / IN_PROGRESS).exists()
        assert not (tmp_path / "backups" / "2026-11-23").exists()
        with pytest.raises(RestoreError, match="unfinished"):
            await restore(folder, tmp_path / "restored.sqlite3", NOW)
    finally:
        await store.close()


def test_a_day_cut_short_is_not_counted_as_backed_up(tmp_path: Path) -> None:
    """The start-up catch-up must run again after a backup was killed or stopped: a folder still marked in
    progress holds a snapshot, but it is not a backup."""
    for day, finished in (("2026-11-21", True), ("2026-11-22", False)):
        (tmp_path / day).mkdir()
        (tmp_path / day / SNAPSHOT_NAME).write_bytes(b"")
        if not finished:
            (tmp_path / day / IN_PROGRESS).write_text("started\n")
    assert jobs.newest_backup_day(tmp_path) == date(2026, 11, 21)


def test_the_export_process_reports_its_failure_in_one_line(tmp_path: Path) -> None:
    """A snapshot the export cannot read: a BackupError naming the cause, no traceback from the child."""
    snapshot = tmp_path / SNAPSHOT_NAME
    snapshot.write_bytes(b"not a database")
    with pytest.raises(BackupError, match="the CSV export failed: StorageError"):
        backup.export_in_worker(snapshot, tmp_path, ZoneInfo("Asia/Shanghai"), NOW)


def test_the_export_process_reports_every_file_and_finishes_the_snapshot(tmp_path: Path) -> None:
    async def build() -> Path:
        store = await SQLiteStore.open(tmp_path / "memory.sqlite3")
        try:
            for uid in (1, 2, 3):
                await store.add_turn(Scope(uid), Turn(user="你好", reply=None, at=NOW))
            await store.snapshot(tmp_path / SNAPSHOT_NAME, standalone=False)
        finally:
            await store.close()
        return tmp_path / SNAPSHOT_NAME

    snapshot = asyncio.run(build())
    seen: list[tuple[int, int]] = []
    files = backup.export_in_worker(snapshot, tmp_path, ZoneInfo("Asia/Shanghai"), NOW,
                                    lambda done, total: seen.append((done, total))).files
    assert files == 3 and seen == [(1, 3), (2, 3), (3, 3)]
    assert sorted(p.name for p in tmp_path.glob("*.csv")) == ["u1.csv", "u2.csv", "u3.csv"]
    assert not list(tmp_path.glob(f"{SNAPSHOT_NAME}-*"))  # made standalone: no -wal/-shm beside it


def _record(seen: list[tuple[int, int]], done: int, total: int) -> None:
    seen.append((done, total))


def test_several_export_processes_write_the_same_files_as_one(tmp_path: Path) -> None:
    async def build(path: Path) -> Path:
        store = await SQLiteStore.open(path / "memory.sqlite3")
        try:
            for uid in range(1, 8):
                await store.apply_changes(Scope(uid), NOW, inserts=[
                    MemoryDraft(event=f"用户{uid}喜欢=猫", keywords=["猫"], importance=70.0, validity=Validity.DAYS_30,
                                type=MemoryType.PREFERENCE)])
            await store.snapshot(path / SNAPSHOT_NAME, standalone=False)
        finally:
            await store.close()
        return path / SNAPSHOT_NAME

    outputs = []
    for workers in (1, 3):
        folder = tmp_path / f"w{workers}"
        folder.mkdir()
        snapshot = asyncio.run(build(folder))
        seen: list[tuple[int, int]] = []
        record = functools.partial(_record, seen)
        assert backup.export_in_worker(snapshot, folder, ZoneInfo("Asia/Shanghai"), NOW, record,
                                       workers=workers) == backup.Exported(7, 7)
        assert [done for done, _ in seen] == list(range(1, 8)) and {total for _, total in seen} == {7}
        outputs.append({p.name: p.read_bytes() for p in folder.glob("*.csv")})
    assert len(outputs[0]) == 7 and outputs[0] == outputs[1]


async def test_two_backups_of_one_day_take_turns(tmp_path: Path) -> None:
    """The operator's ``backup`` while the bot makes its own: both write the same day's files, so the
    second waits for the first instead of interleaving with it."""
    store = await SQLiteStore.open(tmp_path / "data" / "memory.sqlite3")
    try:
        for uid in range(1, 6):
            await store.apply_changes(Scope(uid), NOW, inserts=[
                MemoryDraft(event=f"用户{uid}养了猫", keywords=["猫"], importance=70.0)])
        first, second = await asyncio.gather(
            backup.make_backup(MaintenancePort(store), tmp_path / "backups", NOW, ZoneInfo("Asia/Shanghai"), 7),
            backup.make_backup(MaintenancePort(store), tmp_path / "backups", NOW, ZoneInfo("Asia/Shanghai"), 7))
    finally:
        await store.close()
    assert (first.folder, first.files, second.files) == (second.folder, 5, 5)
    assert not (first.folder / IN_PROGRESS).exists()
    expected = [SNAPSHOT_NAME, *(f"u{n}.csv" for n in range(1, 6))]
    assert sorted(p.name for p in first.folder.iterdir()) == sorted(expected)


def test_a_stop_reaches_the_export_before_any_file_is_written(tmp_path: Path) -> None:
    """Stopped while its processes still start (no file written yet, so no progress to raise from): the
    export gives up at its next look at the stop and kills them."""
    async def build() -> Path:
        store = await SQLiteStore.open(tmp_path / "memory.sqlite3")
        try:
            await store.add_turn(Scope(1), Turn(user="你好", reply=None, at=NOW))
            await store.snapshot(tmp_path / SNAPSHOT_NAME, standalone=False)
        finally:
            await store.close()
        return tmp_path / SNAPSHOT_NAME

    snapshot = asyncio.run(build())
    stop = threading.Event()
    stop.set()
    with pytest.raises(backup.BackupStopped):
        backup.export_in_worker(snapshot, tmp_path, ZoneInfo("Asia/Shanghai"), NOW, stop=stop)
    assert multiprocessing.active_children() == []
    assert not list(tmp_path.glob("*.csv"))
