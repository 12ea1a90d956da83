"""Rebuild the database from a backup: a day folder of CSV files, or a ``memory.sqlite3`` snapshot.

Everything is read and checked before anything is written. The new database is built beside the live
one and renamed into place; a database that held data is kept as ``*.before-restore-<time>``, so a
restore never destroys what was there.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from companion.core.errors import InvalidScopeError, RestoreError
from companion.core.models import Memory, MemoryType, Scope, Source, Validity
from companion.core.rules import MAX_IMPORTANCE, MIN_IMPORTANCE
from companion.ops.backup import CSV_HEADERS, DB_COLUMNS, TIME_COLUMNS, unneutralise
from companion.storage.sqlite import Storage

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class RestoreResult:
    scopes: int
    rows: int
    kept_old: Path | None


def read_backup_csv(path: Path) -> tuple[Scope, list[Memory]]:
    """Parse and validate one scope's CSV. Raises RestoreError naming the file and line."""
    try:
        scope = Scope.from_key(path.stem)
    except InvalidScopeError as exc:
        raise RestoreError(f"{path.name}: file name is not a scope ({exc})") from None
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, OSError) as exc:
        raise RestoreError(f"{path.name}: unreadable CSV ({exc})") from None
    headers = tuple(frame.columns)
    if headers[: len(CSV_HEADERS)] != CSV_HEADERS:
        raise RestoreError(f"{path.name}: unexpected header {','.join(headers)}")
    memories = []
    for line, values in enumerate(frame.itertuples(index=False, name=None), start=2):
        try:
            memories.append(_memory(_decoded(values)))
        except (ValueError, KeyError, TypeError) as exc:
            raise RestoreError(f"{path.name} line {line}: {exc}") from None
    ids = [m.id for m in memories]
    if len(ids) != len(set(ids)):
        raise RestoreError(f"{path.name}: duplicate ids")
    return scope, memories


def _decoded(values: tuple[str, ...]) -> dict[str, str]:
    return {
        column: value if column in TIME_COLUMNS else unneutralise(value)
        for column, value in zip(DB_COLUMNS, values, strict=False)
    }


def _memory(row: dict[str, str]) -> Memory:
    times = {col: _time(row[col], col) for col in TIME_COLUMNS}
    importance = float(row["importance"])
    if not MIN_IMPORTANCE <= importance <= MAX_IMPORTANCE:
        raise ValueError(f"importance {importance} outside 0-100")
    # No check on the event text: whatever the database held (even blank) must restore, or a backup
    # with one odd row could never be restored at all.
    event = row["event"]
    created, updated, decayed = times["created_at"], times["updated_at"], times["last_decay_at"]
    if created is None or updated is None or decayed is None:
        raise ValueError("created, updated and decay times are required")
    return Memory(
        id=_positive_int(row["id"], "id"),
        event=event,
        keywords=[k for k in row["keywords"].split(",") if k],
        importance=importance,
        created_at=created,
        validity=Validity(row["validity"]),
        last_mentioned_at=times["last_mentioned_at"],
        updated_at=updated,
        expires_at=times["expires_at"],
        type=MemoryType(row["type"]),
        source=Source(row["source"]),
        mention_count=_positive_int(row["mention_count"], "mention count", allow_zero=True),
        last_decay_at=decayed,
    )


def _positive_int(text: str, what: str, *, allow_zero: bool = False) -> int:
    value = int(text)
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} {value} is not positive")
    return value


def _time(text: str, column: str) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"{column} {text!r} has no UTC offset")
    return moment


def read_backup_folder(folder: Path, progress: Progress | None = None) -> dict[Scope, list[Memory]]:
    files = sorted(p for p in folder.glob("*.csv") if not p.name.startswith("."))
    if not files:
        raise RestoreError(f"{folder} holds no CSV files")
    data: dict[Scope, list[Memory]] = {}
    for done, path in enumerate(files, start=1):
        scope, memories = read_backup_csv(path)
        data[scope] = memories
        if progress is not None:
            progress(done, len(files))
    return data


def check_snapshot(path: Path) -> None:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            status = conn.execute("PRAGMA integrity_check").fetchone()
            keys = [str(r[0]) for r in conn.execute("SELECT key FROM scopes")]
            # Every registered scope must name a readable memory table, or counting it later would fail
            # with a bare sqlite3 error after the copy.
            for key in keys:
                conn.execute(f'SELECT count(*) FROM "{Scope.from_key(key).table}"').fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, InvalidScopeError) as exc:
        raise RestoreError(f"{path.name} is not a usable snapshot: {exc}") from None
    if status is None or status[0] != "ok":
        raise RestoreError(f"{path.name} failed the integrity check: {status}")


def database_has_data(db_path: Path) -> bool:
    if not db_path.exists() or db_path.stat().st_size == 0:
        return False
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            keys = [str(r[0]) for r in conn.execute("SELECT key FROM scopes")]
            return any(
                conn.execute(f'SELECT 1 FROM "{Scope.from_key(k).table}" LIMIT 1').fetchone() for k in keys
            ) or bool(conn.execute("SELECT 1 FROM pending_turns LIMIT 1").fetchone())
        finally:
            conn.close()
    except sqlite3.Error:
        return True  # unreadable is not "empty": never overwrite it without --force


async def restore(
    source: Path, db_path: Path, now: datetime, *, force: bool = False, progress: Progress | None = None
) -> RestoreResult:
    if not source.exists():
        raise RestoreError(f"{source} does not exist")
    # Read and check the backup first: a corrupt backup is reported before anything else is asked.
    data = read_backup_folder(source, progress) if source.is_dir() else None
    if data is None:
        check_snapshot(source)
    if database_has_data(db_path) and not force:
        raise RestoreError(f"{db_path} already holds memories; add --force to replace it (it will be kept aside)")
    staging = db_path.with_name(f".{db_path.name}.restoring")
    db_path.parent.mkdir(parents=True, exist_ok=True)  # restoring onto a fresh machine has no data dir yet
    _remove_db(staging)
    try:
        if data is not None:
            scopes, rows = await _build(staging, data, now)
        else:
            shutil.copyfile(source, staging)
            scopes, rows = _count(staging)
    except BaseException:
        _remove_db(staging)
        raise
    kept = _swap_in(staging, db_path, now)
    return RestoreResult(scopes, rows, kept)


async def _build(path: Path, data: dict[Scope, list[Memory]], now: datetime) -> tuple[int, int]:
    storage = await Storage.open(path)
    try:
        for scope, memories in data.items():
            await storage.import_rows(scope, memories, now)
    finally:
        await storage.close()
    return len(data), sum(len(m) for m in data.values())


def _count(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        keys = [str(r[0]) for r in conn.execute("SELECT key FROM scopes")]
        rows = sum(conn.execute(f'SELECT count(*) FROM "{Scope.from_key(k).table}"').fetchone()[0] for k in keys)
    finally:
        conn.close()
    return len(keys), rows


def _swap_in(staging: Path, db_path: Path, now: datetime) -> Path | None:
    """Move the live database (with its WAL, which may hold recent commits) aside, then rename in."""
    kept: Path | None = None
    if db_path.exists():
        kept = db_path.with_name(f"{db_path.name}.before-restore-{now.strftime('%Y%m%dT%H%M%S')}")
        os.replace(db_path, kept)
    for suffix in ("-wal", "-shm"):
        side = Path(f"{db_path}{suffix}")
        if side.exists():
            if kept is not None:
                os.replace(side, f"{kept}{suffix}")
            else:
                side.unlink()
    os.replace(staging, db_path)
    return kept


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
