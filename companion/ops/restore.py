"""Rebuild the database from a backup: a day folder of CSV files, or a ``memory.sqlite3`` snapshot.

Everything is read and checked before anything is written. The new database is built beside the live
one and renamed into place; a database that held data is kept as ``*.before-restore-<time>``, so a
restore never destroys what was there. The swap is crash-safe: the live file is hard-linked (or copied)
to its kept name first and then replaced by the new one in a single rename, so a crash at any moment
leaves a whole database in place. The newest ``keep`` kept copies stay; older ones are pruned.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from companion.core.errors import InvalidScopeError, RestoreError, StorageError
from companion.core.models import Memory, Scope
from companion.ops.backup import IN_PROGRESS, fsync
from companion.ops.csvformat import BY_HEADER, LEGACY_HEADERS, ZONE_HEADER, parse_row
from companion.ops.staging import remove_staging, staging_path
from companion.storage.snapshot import checkpoint, open_snapshot
from companion.storage.sqlite import SQLiteStore

Progress = Callable[[int, int], None]


BEFORE_RESTORE = ".before-restore-"
SIDE_FILES = ("-wal", "-shm")


@dataclass(frozen=True, slots=True)
class RestoreResult:
    scopes: int
    rows: int
    kept_old: Path | None
    pruned: tuple[Path, ...] = ()  # older before-restore copies removed (beyond ``keep``)


@dataclass(frozen=True, slots=True)
class ScopeBackup:
    scope: Scope
    memories: list[Memory]
    legacy: bool  # the first format: ids were numbered per user, so they get fresh handles


def read_backup_csv(path: Path) -> ScopeBackup:
    """Parse and validate one scope's CSV. Raises RestoreError naming the file and line."""
    try:
        scope = Scope.from_key(path.stem)
    except InvalidScopeError as exc:
        raise RestoreError(f"{path.name}: file name is not a scope ({exc})") from None
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise RestoreError(f"{path.name}: {_encoding_hint(path)}") from None
    except (ValueError, pd.errors.ParserError, OSError) as exc:
        raise RestoreError(f"{path.name}: unreadable CSV ({exc})") from None
    headers = tuple(str(h) for h in frame.columns)
    if headers[: len(LEGACY_HEADERS)] != LEGACY_HEADERS:
        raise RestoreError(f"{path.name}: unexpected header {','.join(headers)}")
    unknown = [h for h in headers if h not in BY_HEADER and h != ZONE_HEADER]
    if unknown:
        raise RestoreError(f"{path.name}: unknown columns {','.join(unknown)}")
    memories = []
    for line, values in enumerate(frame.itertuples(index=False, name=None), start=2):
        try:
            memories.append(parse_row(dict(zip(headers, values, strict=True))))
        except (ValueError, KeyError, TypeError) as exc:
            raise RestoreError(f"{path.name} line {line}: {exc}") from None
    ids = [m.id for m in memories]
    if len(ids) != len(set(ids)):
        raise RestoreError(f"{path.name}: duplicate ids")
    return ScopeBackup(scope, memories, legacy="状态" not in headers)


def _encoding_hint(path: Path) -> str:
    raw = path.read_bytes()
    try:
        raw.decode("gbk")
    except UnicodeDecodeError:
        return "not UTF-8 text; save it as UTF-8 (Excel: 'CSV UTF-8') and try again"
    return "saved as GBK/ANSI, not UTF-8; in Excel use 'Save as' > 'CSV UTF-8 (comma delimited)' and try again"


def read_backup_folder(folder: Path, progress: Progress | None = None) -> list[ScopeBackup]:
    files = sorted(p for p in folder.glob("*.csv") if not p.name.startswith("."))
    if not files:
        raise RestoreError(f"{folder} holds no CSV files")
    data: list[ScopeBackup] = []
    owners: dict[int, str] = {}
    for done, path in enumerate(files, start=1):
        part = read_backup_csv(path)
        if not part.legacy:
            for memory in part.memories:
                other = owners.setdefault(memory.id, path.name)
                if other != path.name:
                    raise RestoreError(f"{path.name}: memory {memory.id} is also in {other}")
        data.append(part)
        if progress is not None:
            progress(done, len(files))
    return data


def check_snapshot(path: Path) -> None:
    """Refuse a snapshot that fails the integrity check or whose scopes do not all have a readable table
    (counting it later would fail after the copy)."""
    try:
        with open_snapshot(path) as reader:
            status = reader.integrity()
            reader.count()
    except StorageError as exc:
        raise RestoreError(str(exc)) from None
    if status != "ok":
        raise RestoreError(f"{path.name} failed the integrity check: {status}")


def database_has_data(db_path: Path) -> bool:
    if not db_path.exists() or db_path.stat().st_size == 0:
        return False
    try:
        with open_snapshot(db_path) as reader:
            return reader.count()[1] > 0 or reader.has_pending_turns()
    except StorageError:
        return True  # unreadable is not "empty": never overwrite it without --force


async def restore(
    source: Path, db_path: Path, now: datetime, *, force: bool = False, progress: Progress | None = None,
    keep: int = 3,
) -> RestoreResult:
    """Replace the database at ``db_path`` (the caller holds its lock, companion.ops.dblock) with the
    backup at ``source``; the newest ``keep`` before-restore copies are kept."""
    if not source.exists():
        raise RestoreError(f"{source} does not exist")
    for marked in (source, source.parent):
        if (marked / IN_PROGRESS).exists():
            raise RestoreError(f"{marked} is an unfinished backup (the run was interrupted); use an earlier day")
    # Read and check the backup first: a corrupt backup is reported before anything else is asked.
    data = read_backup_folder(source, progress) if source.is_dir() else None
    if data is None:
        check_snapshot(source)
    if database_has_data(db_path) and not force:
        raise RestoreError(f"{db_path} already holds memories; add --force to replace it (it will be kept aside)")
    staging = staging_path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)  # restoring onto a fresh machine has no data dir yet
    remove_staging(db_path)  # a killed restore's leftover
    try:
        if data is not None:
            scopes, rows = await _build(staging, data, now)
        else:
            shutil.copyfile(source, staging)
            with open_snapshot(staging) as reader:
                scopes, rows = reader.count()
        _settle(staging)
    except StorageError as exc:
        remove_staging(db_path)
        raise RestoreError(f"restore failed, nothing changed: {exc}") from None
    except BaseException:
        remove_staging(db_path)
        raise
    kept = _swap_in(staging, db_path, now)
    return RestoreResult(scopes, rows, kept, prune_before_restore(db_path, keep))


async def _build(path: Path, data: list[ScopeBackup], now: datetime) -> tuple[int, int]:
    store = await SQLiteStore.open(path)
    try:
        for part in data:
            await store.import_rows(part.scope, part.memories, now, keep_ids=not part.legacy)
    finally:
        await store.close()
    return len(data), sum(len(p.memories) for p in data)


def _swap_in(staging: Path, db_path: Path, now: datetime) -> Path | None:
    """Put the staged database in place of the live one; return where the live one is kept.

    Each step leaves a whole database at ``db_path``: the live file is checkpointed (its WAL folded in and
    truncated), linked to the kept name with its side files, its now empty side files removed (a stale WAL
    would be replayed onto the new file), and only then replaced by the staged file in one rename."""
    kept: Path | None = None
    if db_path.exists():
        with contextlib.suppress(StorageError):
            checkpoint(db_path)  # a damaged file is kept as it is, side files and all
        kept = _kept_name(db_path, now)
        for suffix in ("", *SIDE_FILES):
            live = Path(f"{db_path}{suffix}")
            if live.exists():
                _link_or_copy(live, Path(f"{kept}{suffix}"))
        fsync(db_path.parent)
    for suffix in SIDE_FILES:
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    os.replace(staging, db_path)
    fsync(db_path.parent)
    return kept


def _settle(staging: Path) -> None:
    """The staged file alone must hold the whole database before it is renamed in: fold and drop its WAL."""
    checkpoint(staging)
    for suffix in SIDE_FILES:
        Path(f"{staging}{suffix}").unlink(missing_ok=True)
    fsync(staging)


def _kept_name(db_path: Path, now: datetime) -> Path:
    base = db_path.with_name(f"{db_path.name}{BEFORE_RESTORE}{now.strftime('%Y%m%dT%H%M%S')}")
    kept, n = base, 1
    while kept.exists():  # two restores within a second must not overwrite the first kept copy
        n += 1
        kept = base.with_name(f"{base.name}-{n}")
    return kept


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link costs nothing and cannot be half-written; a file system without links gets a synced copy."""
    try:
        os.link(source, target)
    except OSError:
        partial = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(source, partial)
        fsync(partial)
        os.replace(partial, target)


def before_restore_copies(db_path: Path) -> list[Path]:
    """The kept databases of earlier restores, oldest first (their names sort by time)."""
    prefix = f"{db_path.name}{BEFORE_RESTORE}"
    return sorted(p for p in db_path.parent.glob(f"{prefix}*") if not p.name.endswith(SIDE_FILES))


def prune_before_restore(db_path: Path, keep: int) -> tuple[Path, ...]:
    """Remove all but the newest ``keep`` before-restore copies, each with its -wal/-shm."""
    copies = before_restore_copies(db_path)
    old = copies[: max(len(copies) - keep, 0)]
    for path in old:
        for suffix in (*SIDE_FILES, ""):  # the main file last: a copy is never left without its WAL
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return tuple(old)
