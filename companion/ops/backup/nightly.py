"""Nightly backups an operator can open in Excel, and restore.

A backup is a folder ``<BACKUP_DIR>/<YYYY-MM-DD>/`` holding ``memory.sqlite3`` (a consistent snapshot
through SQLite's backup API) and one CSV per scope, streamed from that snapshot in the form of
``csvformat``. Every file is written to a temporary name first and renamed into place; the whole folder is
built as ``.<day>.partial`` and renamed to its day only when whole, so a run that fails (a full disk) or is
stopped never spoils the day's earlier backup. A scope whose table cannot be read (a damaged page) is left
out and named; every other scope is backed up. The CSV export
runs in processes of their own, one per core and below the bot's priority: reading the snapshot parses
its whole schema (~17 MB at 10,000 users) and the export is seconds of CPU, neither of which the bot
should pay while it chats.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import multiprocessing
import os
import re
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from companion.core import csvfile
from companion.core.csvformat import CELLS, HEADERS, fixed_offset, zone_name
from companion.core.errors import BackupError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import local_date
from companion.engine.maintenance_port import MaintenancePort
from companion.engine.snapshots import make_standalone, open_snapshot

SNAPSHOT_NAME = "memory.sqlite3"
IN_PROGRESS = ".backup-in-progress"
LOCK_POLL_S = 0.2
_DAY_FOLDER = re.compile(r"^\d{4}-\d{2}-\d{2}$")

Progress = Callable[[int, int], None]
FSYNC_THREADS = 16
PUBLISH_BATCH = 256  # temporary files waiting for their fsync at any time
WORKER_EXIT_S = 10.0
WORKER_POLL_S = 0.5
MAX_WORKERS = 4  # CSV export processes (one per core up to this); the snapshot is read, never written
WORKER_NICE = 10
FLUSH_CHARS = 20_000_000  # streamed CSV held before its files are written


class BackupStopped(BackupError):
    """The process is stopping: the export gives up at once, its processes are killed."""


@dataclass(frozen=True, slots=True)
class BackupResult:
    folder: Path
    files: int
    rows: int
    removed_folders: int
    damaged: tuple[str, ...] = ()  # "scope key: cause" of each scope that could not be read
    users: int = 0  # distinct users over the backed-up scopes (``files``: one per scope)


@dataclass(frozen=True, slots=True)
class Exported:
    files: int
    rows: int
    damaged: tuple[str, ...] = ()


def staging_folder(backup_dir: Path, day: str) -> Path:
    """Where a day's backup is built (not named like a day: restore, pruning and the catch-up skip it)."""
    return backup_dir / f".{day}.partial"


def replaced_folder(backup_dir: Path, day: str) -> Path:
    """Where the day's previous backup waits, for the moment of the swap, before it is removed."""
    return backup_dir / f".{day}.replaced"


def discard(folder: Path) -> None:
    """Remove a backup folder so that a process killed part-way leaves it marked unfinished (``IN_PROGRESS``:
    restore refuses it, the next run removes it), never looking like a whole backup with files missing."""
    marker = folder / IN_PROGRESS
    marker.write_text("being removed\n", encoding="utf-8")
    for child in folder.iterdir():
        if child == marker:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    marker.unlink()
    folder.rmdir()


def write_csv(path: Path, rows: Iterable[Sequence[object]], lines: Iterable[str] = ()) -> int:
    """A backup's CSV file: its header, rows and lines of CSV text written before (``stream_csv``) into
    ``path`` (not yet durable: see ``publish``); returns the rows written (``lines`` are not counted)."""
    return csvfile.write_csv(path, HEADERS, rows, lines)


def fsync(path: Path) -> None:
    """A file's data, or a folder's entries (a rename is durable once its folder is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(written: Sequence[tuple[Path, Path]]) -> None:
    """Make temporary files durable, then rename each into place. The fsyncs run in parallel: one after
    another each waits for its own journal commit (~2.5 ms here, 25 s for 10,000 users), together the
    file system commits them in groups (~0.15 ms each)."""
    if not written:
        return
    with ThreadPoolExecutor(FSYNC_THREADS) as pool:
        list(pool.map(fsync, [tmp for tmp, _ in written]))
    for tmp, path in written:
        os.replace(tmp, path)


def export_csv(
    snapshot: Path, folder: Path, tz: tzinfo, now: datetime, progress: Progress | None = None,
    part: tuple[int, int] = (0, 1),
) -> Exported:
    """One CSV per scope from a snapshot file, streamed from one read transaction; files are published
    (fsync, rename) in batches. ``part`` (index, parts): only every parts-th scope from the index-th,
    so several processes can share the work. A scope whose rows cannot be read is left out (no file, no
    temporary file) and named in ``damaged``. Blocking: run it in a thread."""
    offset = fixed_offset(tz, now)
    zone = zone_name(tz)
    total_rows = 0
    written: list[tuple[Path, Path]] = []
    damaged: list[str] = []
    index, parts = part
    with open_snapshot(snapshot) as reader:
        scopes = reader.scopes()[index::parts]
        for done, (scope, _) in enumerate(scopes, start=1):
            path = folder / f"{scope.key}.csv"
            tmp = path.with_name(f".{path.name}.tmp")
            try:
                total_rows += write_csv(tmp, ((*row, zone) for row in reader.cell_rows(scope, CELLS, tz, offset)))
            except StorageError as exc:  # one damaged table: the other scopes are still backed up
                tmp.unlink(missing_ok=True)
                damaged.append(f"{scope.key}: {exc}")
            else:
                written.append((tmp, path))
            if len(written) >= PUBLISH_BATCH:
                publish(written)
                written.clear()
            if progress is not None:
                progress(done, len(scopes))
        publish(written)
    return Exported(len(scopes) - len(damaged), total_rows, tuple(damaged))


def _export_worker(snapshot: Path, folder: Path, tz: tzinfo, now: datetime, out: Connection,
                   part: tuple[int, int]) -> None:
    """One export process: (the first) finish the snapshot and tell how many files there will be, then
    write its part of the CSV files; progress and the result go to ``out``."""
    index = part[0]
    parent = os.getppid()

    def report(done: int, _: int) -> None:
        if os.getppid() != parent:  # the bot was killed: nobody will finish this backup, stop writing
            raise BackupError("the bot process is gone")
        out.send(("progress", index, done))

    try:
        with contextlib.suppress(OSError):  # below the bot, whose chats must not wait for the backup
            os.nice(WORKER_NICE)
        if index == 0:
            make_standalone(snapshot)
            with open_snapshot(snapshot) as reader:
                out.send(("ready", len(reader.scopes())))
        result = export_csv(snapshot, folder, tz, now, report, part)
        out.send(("done", index, result))
    except Exception as exc:  # the edge of the process: the parent raises it as a BackupError
        out.send(("error", index, f"{type(exc).__name__}: {exc}"))
    finally:
        out.close()


def _worker_context() -> ForkServerContext | SpawnContext:
    """Where it exists (Linux, macOS), a fork server that imported this module once: each export process is
    then a fork of it (a few milliseconds) instead of a new interpreter importing everything again (~0.3 s of
    CPU a process, twice a backup); never a fork of the bot itself, whose threads and event loop a fork would
    copy mid-state. Elsewhere, a new interpreter (spawn)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def export_in_worker(
    snapshot: Path, folder: Path, tz: tzinfo, now: datetime, progress: Progress | None = None,
    workers: int | None = None, stop: threading.Event | None = None,
) -> Exported:
    """``export_csv`` in processes of their own, one per core up to ``MAX_WORKERS`` (or ``workers``), at
    a lower priority than the bot, with ``progress`` called here as files are written. When ``progress``
    raises, ``stop`` is set (the backup was stopped: noticed within ``WORKER_POLL_S``, even while the
    processes start) or anything else goes wrong, every process is killed at once. Blocking: run it in a
    thread."""
    count = max(1, workers if workers is not None else min(os.cpu_count() or 1, MAX_WORKERS))
    context = _worker_context()
    receive, send = context.Pipe(duplex=False)
    processes: list[BaseProcess] = []
    written: dict[int, int] = {}  # part -> files written
    results: dict[int, Exported] = {}
    total = 0

    def start(index: int) -> None:
        worker = context.Process(target=_export_worker, args=(snapshot, folder, tz, now, send, (index, count)),
                                 name=f"backup-export-{index}", daemon=True)
        worker.start()
        processes.append(worker)

    try:
        start(0)  # it makes the snapshot standalone first; the others start once it has
        while len(results) < count:
            if stop is not None and stop.is_set():
                raise BackupStopped("backup stopped before every file was written")
            if not receive.poll(WORKER_POLL_S):
                if not any(worker.is_alive() for worker in processes):
                    codes = ", ".join(str(worker.exitcode) for worker in processes)
                    raise BackupError(f"the CSV export process ended without a result (exit code {codes})")
                continue
            message = receive.recv()
            if message[0] == "ready":
                total = int(message[1])
                for index in range(1, count):
                    start(index)
            elif message[0] == "progress":
                written[int(message[1])] = int(message[2])
                if progress is not None:
                    progress(sum(written.values()), total)
            elif message[0] == "done":
                results[int(message[1])] = message[2]
            else:
                raise BackupError(f"the CSV export failed: {message[2]}")
        done = [results[i] for i in sorted(results)]
        return Exported(sum(r.files for r in done), sum(r.rows for r in done),
                        tuple(sorted(d for r in done for d in r.damaged)))
    finally:
        for worker in processes:
            if len(results) < count:
                worker.kill()  # stopped or failed: none may go on writing files
            worker.join(WORKER_EXIT_S)
            if worker.is_alive():
                worker.kill()
                worker.join()
        send.close()
        receive.close()


async def make_backup(
    database: MaintenancePort, backup_dir: Path, now: datetime, tz: tzinfo, keep_days: int,
    progress: Progress | None = None, stop: threading.Event | None = None,
) -> BackupResult:
    """Snapshot the database, then write one CSV per scope from that snapshot, then prune old days; a
    database kept in no file (a server's) streams its memories into the CSV
    files instead, without a snapshot. One backup at a time: a second (the operator's ``backup`` while the
    bot makes its own) waits for the first, as both would build the same day."""
    backup_dir.mkdir(parents=True, exist_ok=True)
    async with _one_at_a_time(backup_dir):
        return await _make_backup(database, backup_dir, now, tz, keep_days, progress, stop)


@contextlib.asynccontextmanager
async def _one_at_a_time(backup_dir: Path) -> AsyncIterator[None]:
    # flock on the backup folder itself (never renamed, unlike a day's folder): no lock file among the
    # backups, and the operating system releases it when the holder dies, even by kill -9.
    fd = os.open(backup_dir, os.O_RDONLY)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_S)  # polled, not blocked in a thread: a stop can cancel the wait
        yield
    finally:
        os.close(fd)  # releases the flock


_LEFTOVER = re.compile(r"^\.(\d{4}-\d{2}-\d{2})\.(partial|replaced)$")


def recover(backup_dir: Path) -> None:
    """Finish what runs killed part-way left, for every day (call with the lock held)."""
    for day in sorted({m.group(1) for c in backup_dir.iterdir() if (m := _LEFTOVER.match(c.name))}):
        recover_day(backup_dir, day)


def recover_day(backup_dir: Path, day: str) -> None:
    """A run killed at its swap: the previous backup comes back if the new one never took its place (or
    is removed if it did); a half-built folder is removed."""
    folder, old = backup_dir / day, replaced_folder(backup_dir, day)
    if old.exists():
        if folder.exists():
            discard(old)
        else:
            os.replace(old, folder)
    shutil.rmtree(staging_folder(backup_dir, day), ignore_errors=True)


def swap_in(staging: Path, folder: Path) -> None:
    """Put a whole backup in the day's place; an earlier backup of the day stays whole until then."""
    old = replaced_folder(folder.parent, folder.name)
    fsync(staging)
    if folder.exists():
        os.replace(folder, old)
    os.replace(staging, folder)
    fsync(folder.parent)
    if old.exists():
        discard(old)


async def export_streamed(
    database: MaintenancePort, folder: Path, tz: tzinfo, now: datetime, progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> tuple[Exported, int]:
    """One CSV per scope from the lines the store streams (``stream_csv``: rendered by the store, read in
    large pages across scopes), the files written and published off the event loop a group at a time;
    returns what was written and how many distinct users."""
    scopes = await database.scopes()
    ready: list[tuple[Scope, list[str]]] = []
    done: set[Scope] = set()
    total_rows = 0

    async def flush() -> None:
        await asyncio.to_thread(write_scopes, folder, ready)
        done.update(scope for scope, _ in ready)
        ready.clear()
        if progress is not None:
            progress(len(done), len(scopes))

    held = 0  # characters of lines waiting for their files
    async for scope, lines, count in database.stream_csv(CELLS, tz, fixed_offset(tz, now), (zone_name(tz),)):
        if stop is not None and stop.is_set():
            raise BackupStopped("backup stopped before every file was written")
        if not ready or ready[-1][0] != scope:
            if len(ready) >= PUBLISH_BATCH or held >= FLUSH_CHARS:
                await flush()
                held = 0
            ready.append((scope, []))
        ready[-1][1].append(lines)
        held += len(lines)
        total_rows += count
    await flush()
    ready.extend((scope, []) for scope in scopes if scope not in done)  # no memories: a file of headers alone
    await flush()
    return Exported(len(done), total_rows), len({s.user_id for s in done})


def write_scopes(folder: Path, scopes: Sequence[tuple[Scope, Sequence[str]]]) -> None:
    """Each scope's CSV lines into its file after the header, then publish them."""
    written: list[tuple[Path, Path]] = []
    for scope, chunks in scopes:
        path = folder / f"{scope.key}.csv"
        tmp = path.with_name(f".{path.name}.tmp")
        write_csv(tmp, (), chunks)
        written.append((tmp, path))
    publish(written)


async def _make_backup(
    database: MaintenancePort, backup_dir: Path, now: datetime, tz: tzinfo, keep_days: int, progress: Progress | None,
    stop: threading.Event | None,
) -> BackupResult:
    day = local_date(now, tz)
    folder = backup_dir / day
    staging = staging_folder(backup_dir, day)
    try:
        recover(backup_dir)
        in_a_file = database.in_a_file
        # Every table at the current version first, so the CSV files all have the same columns.
        while await database.upgrade_stale(200):
            pass
        staging.mkdir()
        # Until this marker is gone the folder is not a backup: restore refuses it (a run cut short by a
        # crash or a kill leaves it behind, so a half-written day is never taken for a whole one).
        (staging / IN_PROGRESS).write_text(f"started {now.isoformat()}\n", encoding="utf-8")
        if in_a_file:
            exported = await _export_snapshot(database, staging, now, tz, progress, stop)
        else:
            exported, users = await export_streamed(database, staging, tz, now, progress, stop)
        (staging / IN_PROGRESS).unlink()
        swap_in(staging, folder)
        if in_a_file:
            with open_snapshot(folder / SNAPSHOT_NAME) as reader:
                users = len({scope.user_id for scope, _ in reader.scopes()})
        removed = await asyncio.to_thread(prune_backups, backup_dir, now, tz, keep_days)
    except BackupStopped:
        raise  # the process is stopping: no time for a clean-up, the next run removes the folder
    except BackupError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except (OSError, StorageError) as exc:
        # A failed run (a full disk) frees what it wrote; the day's earlier backup was never touched.
        shutil.rmtree(staging, ignore_errors=True)
        raise BackupError(f"backup to {folder} failed: {exc}") from exc
    return BackupResult(folder, exported.files, exported.rows, removed, exported.damaged, users)


async def _export_snapshot(
    database: MaintenancePort, staging: Path, now: datetime, tz: tzinfo, progress: Progress | None,
    stop: threading.Event | None,
) -> Exported:
    tmp_snapshot = staging / f".{SNAPSHOT_NAME}.tmp"
    await database.snapshot(tmp_snapshot, standalone=False)
    os.replace(tmp_snapshot, staging / SNAPSHOT_NAME)
    return await asyncio.to_thread(export_in_worker, staging / SNAPSHOT_NAME, staging, tz, now, progress, None, stop)


def prune_backups(backup_dir: Path, now: datetime, tz: tzinfo, keep_days: int) -> int:
    """Keep the newest ``keep_days`` day folders and today's; anything not named like a day is left alone.

    Counting folders rather than calendar days means a bot that was down for weeks still keeps its last
    good backups instead of deleting all of them at the first run after the outage.
    """
    today = local_date(now, tz)
    days = sorted((c for c in backup_dir.iterdir() if c.is_dir() and _is_day(c.name)), reverse=True)
    removed = 0
    for child in days[max(keep_days, 1) :]:
        if child.name != today:
            discard(child)
            removed += 1
    return removed


def _is_day(name: str) -> bool:
    if not _DAY_FOLDER.match(name):
        return False
    try:
        date.fromisoformat(name)
    except ValueError:
        return False  # "2025-13-45" looks like a day but is someone else's folder
    return True
