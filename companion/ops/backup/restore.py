"""Rebuild the database from a backup: a day folder of CSV files, or a ``memory.sqlite3`` snapshot.

Everything is read and checked before anything is written. The new database is built beside the live
one and renamed into place; a database that held data is kept as ``*.before-restore-<time>``, so a
restore never destroys what was there. The swap is crash-safe: the live file is hard-linked (or copied)
to its kept name first and then replaced by the new one in a single rename, so a crash at any moment
leaves a whole database in place. The newest ``keep`` kept copies stay; older ones are pruned.

A backup holds the text of memories forgotten after it was made. Before the swap, every tombstone of the
database being replaced is applied again to the new one (``reforget``): a memory forgotten since the
backup stays forgotten. Rows that are not forgotten count as memories, tombstones are counted apart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from pathlib import Path

import pandas as pd

from companion.core.csvformat import LEGACY_HEADERS, parse_row
from companion.core.errors import InvalidScopeError, RestoreError, StorageError
from companion.core.extraction import fingerprint
from companion.core.models import Memory, Scope, Status, StatusReason
from companion.engine.maintenance_port import file_url, open_database
from companion.engine.snapshots import checkpoint, open_snapshot
from companion.ops.backup.nightly import IN_PROGRESS, fsync
from companion.ops.backup.staging import remove_staging, staging_path

Progress = Callable[[int, int], None]


BEFORE_RESTORE = ".before-restore-"
SIDE_FILES = ("-wal", "-shm")


EVERY_BUT_FORGOTTEN = frozenset(Status) - {Status.FORGOTTEN}


@dataclass(frozen=True, slots=True)
class RestoreResult:
    scopes: int
    rows: int  # memories: active, archived and superseded
    kept_old: Path | None
    pruned: tuple[Path, ...] = ()  # older before-restore copies removed (beyond ``keep``)
    tombstones: int = 0  # forgotten memories, restored as content-free tombstones
    reforgotten: int = 0  # memories of the backup forgotten since, forgotten again
    cut: int = 0  # over-long cells cut to their cap
    users: int = 0  # distinct users over ``scopes`` (a user has a private scope and one per group)


@dataclass(frozen=True, slots=True)
class ScopeBackup:
    scope: Scope
    memories: list[Memory]
    legacy: bool  # the first format: ids were numbered per user, so they get fresh handles
    cut: int = 0


@dataclass(frozen=True, slots=True)
class Tombstone:
    scope: Scope
    handle: int
    fingerprint: str
    reason: str
    at: datetime


@dataclass(slots=True)
class LiveTombstones:
    """The forgets of the database a restore replaces: by handle, and by fingerprint per scope."""

    by_handle: dict[int, Tombstone] = field(default_factory=dict)
    by_print: dict[tuple[str, str], Tombstone] = field(default_factory=dict)

    def add(self, stone: Tombstone) -> None:
        self.by_handle[stone.handle] = stone
        if stone.fingerprint:
            old = self.by_print.get((stone.scope.key, stone.fingerprint))
            if old is None or old.at < stone.at:
                self.by_print[(stone.scope.key, stone.fingerprint)] = stone

    def match(self, scope: Scope, memory: Memory, fresh: bool) -> Tombstone | None:
        """The tombstone that forgets ``memory``: its own handle (same user; not for fresh handles, which
        name nothing in the old database), or the same words forgotten in its scope after it was made."""
        stone = None if fresh else self.by_handle.get(memory.id)
        if stone is not None and stone.scope.user_id == scope.user_id:
            return stone
        stone = self.by_print.get((scope.key, fingerprint(memory.event))) if memory.event else None
        return stone if stone is not None and stone.at >= memory.created_at else None


def read_backup_csv(path: Path, zone: tzinfo | None = None) -> ScopeBackup:
    """Parse and validate one scope's CSV; times without an offset are read in ``zone`` when the file
    names none. Raises RestoreError naming the file and line."""
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
    # Columns this version does not know (a newer backup) are ignored; optional ones may be missing.
    missing = [h for h in LEGACY_HEADERS if h not in headers]
    if missing or len(set(headers)) != len(headers):
        raise RestoreError(f"{path.name}: unexpected header {','.join(headers)[:200]}")
    memories = []
    cut = 0
    for line, values in enumerate(frame.itertuples(index=False, name=None), start=2):
        try:
            parsed = parse_row(dict(zip(headers, values, strict=True)), zone)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise RestoreError(f"{path.name} line {line}: {str(exc)[:200]}") from None
        memories.append(parsed.memory)
        cut += parsed.cut
    ids = [m.id for m in memories]
    if len(ids) != len(set(ids)):
        raise RestoreError(f"{path.name}: duplicate ids")
    return ScopeBackup(scope, memories, legacy="状态" not in headers, cut=cut)


def _encoding_hint(path: Path) -> str:
    raw = path.read_bytes()
    try:
        raw.decode("gbk")
    except UnicodeDecodeError:
        return "not UTF-8 text; save it as UTF-8 (Excel: 'CSV UTF-8') and try again"
    return "saved as GBK/ANSI, not UTF-8; in Excel use 'Save as' > 'CSV UTF-8 (comma delimited)' and try again"


def read_backup_folder(folder: Path, progress: Progress | None = None, zone: tzinfo | None = None
                       ) -> list[ScopeBackup]:
    files = sorted(p for p in folder.glob("*.csv") if not p.name.startswith("."))
    if not files:
        raise RestoreError(f"{folder} holds no CSV files")
    data: list[ScopeBackup] = []
    owners: dict[int, str] = {}
    for done, path in enumerate(files, start=1):
        part = read_backup_csv(path, zone)
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
    keep: int = 3, tz: tzinfo | None = None, forgotten: LiveTombstones | None = None,
) -> RestoreResult:
    """Replace the database at ``db_path`` (the caller holds its lock, companion.ops.backup.dblock) with the
    backup at ``source``; the newest ``keep`` before-restore copies are kept. ``tz``: the zone of CSV
    times that carry no offset and whose row names none (the configured ``TIMEZONE``). ``forgotten``: the
    forgets of a database this restore replaces that is not the file at ``db_path`` (a server database)."""
    if not source.exists():
        raise RestoreError(f"{source} does not exist")
    for marked in (source, source.parent):
        if (marked / IN_PROGRESS).exists():
            raise RestoreError(f"{marked} is an unfinished backup (the run was interrupted); use an earlier day")
    # Every refusal that costs nothing comes before the backup is read (100,000 memories take seconds).
    if database_has_data(db_path) and not force:
        raise RestoreError(f"{db_path} already holds memories; add --force to replace it (it will be kept aside)")
    data = read_backup_folder(source, progress, tz) if source.is_dir() else None
    if data is None:
        check_snapshot(source)
    staging = staging_path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)  # restoring onto a fresh machine has no data dir yet
    remove_staging(db_path)  # a killed restore's leftover
    try:
        live = live_tombstones(db_path)
        for stone in (forgotten.by_handle.values() if forgotten is not None else ()):
            live.add(stone)
        if data is not None:
            fresh = await _build(staging, data, now)
        else:
            shutil.copyfile(source, staging)
            fresh = set()
        reforgotten = await reforget(staging, live, fresh, now)
        with open_snapshot(staging) as reader:
            scopes, rows, tombstones = reader.tally()
            users = len({scope.user_id for scope, _ in reader.scopes()})
        _settle(staging)
    except StorageError as exc:
        remove_staging(db_path)
        raise RestoreError(f"restore failed, nothing changed: {exc}") from None
    except OverflowError as exc:  # a number the driver cannot bind, raised before the database sees the row
        remove_staging(db_path)
        raise RestoreError(f"restore failed, nothing changed: {type(exc).__name__}: {str(exc)[:200]}") from None
    except BaseException:
        remove_staging(db_path)
        raise
    kept = _swap_in(staging, db_path, now)
    cut = sum(p.cut for p in data) if data is not None else 0
    return RestoreResult(scopes, rows, kept, prune_before_restore(db_path, keep), tombstones, reforgotten, cut,
                         users)


async def _build(path: Path, data: list[ScopeBackup], now: datetime) -> set[int]:
    """Write every scope's memories; returns the fresh handles given to first-format files. Files that
    keep their handles go first: fresh handles are then issued above every kept one, never onto one."""
    fresh: set[int] = set()
    async with open_database(file_url(path)) as database:
        for part in sorted(data, key=lambda p: p.legacy):
            handles = await database.import_rows(part.scope, part.memories, now, keep_ids=not part.legacy)
            if part.legacy:
                fresh.update(handles)
    return fresh


def live_tombstones(db_path: Path) -> LiveTombstones:
    """The tombstones of the database about to be replaced; none when there is none or it is unreadable
    (a damaged file replaced with --force: nothing can be read from it, it is kept aside as it is)."""
    found = LiveTombstones()
    if not db_path.exists() or db_path.stat().st_size == 0:
        return found
    with contextlib.suppress(StorageError), open_snapshot(db_path) as reader:
        for scope, handle, print_, reason, at in reader.tombstones():
            found.add(Tombstone(scope, handle, print_, reason, at))
    return found


async def reforget(path: Path, live: LiveTombstones, fresh: Iterable[int], now: datetime) -> int:
    """Forget again, in the database at ``path``, every memory the replaced database had forgotten."""
    if not live.by_handle:
        return 0
    fresh = set(fresh)
    total = 0
    async with open_database(file_url(path)) as database:
        for scope in await database.scopes():
            by_reason: dict[str, list[int]] = defaultdict(list)
            for memory in await database.memories(scope, EVERY_BUT_FORGOTTEN):
                stone = live.match(scope, memory, memory.id in fresh)
                if stone is not None:
                    by_reason[stone.reason or StatusReason.USER].append(memory.id)
            for reason, ids in by_reason.items():
                # The one forget path: with the tombstones go the profile, the vectors, and the queued and
                # short-term turns that told them, all of which the backup holds too.
                await database.forget(scope, ids, now, reason)
                total += len(ids)
    return total


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
