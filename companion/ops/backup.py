"""Nightly backups an operator can open in Excel, and restore.

A backup is a folder ``<BACKUP_DIR>/<YYYY-MM-DD>/`` holding ``memory.sqlite3`` (a consistent snapshot
through SQLite's backup API) and one CSV per scope, generated from that snapshot. CSV is UTF-8 with BOM
so Excel shows Chinese; cells that a spreadsheet would run as a formula get a leading apostrophe.
Every file is written to a temporary name first and renamed into place.
"""

from __future__ import annotations

import asyncio
import csv
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from pathlib import Path

from companion.core.errors import BackupError
from companion.core.models import Scope
from companion.core.timeutil import from_db, local_date
from companion.storage.sqlite import Storage

SNAPSHOT_NAME = "memory.sqlite3"
CSV_HEADERS = (
    "id", "事件", "关键词", "重要程度", "创建时间", "有效期", "最后提及时间",
    "类型", "来源", "提及次数", "更新时间", "过期时间", "衰减时间",
)
DB_COLUMNS = (
    "id", "event", "keywords", "importance", "created_at", "validity", "last_mentioned_at",
    "type", "source", "mention_count", "updated_at", "expires_at", "last_decay_at",
)
TIME_COLUMNS = frozenset({"created_at", "last_mentioned_at", "updated_at", "expires_at", "last_decay_at"})
SHOWN_TIME = "%Y-%m-%d %H:%M:%S%z"
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "'")
_DAY_FOLDER = re.compile(r"^\d{4}-\d{2}-\d{2}$")

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class BackupResult:
    folder: Path
    files: int
    rows: int
    removed_folders: int


def neutralise(cell: str) -> str:
    """A leading apostrophe makes Excel show ``=1+1`` as text; restore strips exactly one."""
    return f"'{cell}" if cell.startswith(FORMULA_PREFIXES) else cell


def unneutralise(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def show_time(stored: str | None, tz: tzinfo) -> str:
    """Local time with its offset: readable in Excel and exact on the way back."""
    if stored is None:
        return ""
    text = from_db(stored).astimezone(tz).strftime(SHOWN_TIME)
    return f"{text[:-2]}:{text[-2:]}"


def show_number(value: float) -> str:
    """The shortest text that reads back as the same float. Decayed values such as 72.87784375000001
    must survive backup and restore, so no fixed rounding; whole numbers lose the ".0" for people."""
    return repr(value).removesuffix(".0")


def atomic_write_csv(path: Path, rows: Iterator[list[str]] | list[list[str]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_HEADERS)
        writer.writerows(rows)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def export_csv(snapshot: Path, folder: Path, tz: tzinfo, progress: Progress | None = None) -> tuple[int, int]:
    """One CSV per scope from a snapshot file. Blocking: run it in a thread."""
    conn = sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)
    try:
        keys = [str(row[0]) for row in conn.execute("SELECT key FROM scopes ORDER BY key")]
        total_rows = 0
        for done, key in enumerate(keys, start=1):
            scope = Scope.from_key(key)
            cursor = conn.execute(f'SELECT {", ".join(DB_COLUMNS)} FROM "{scope.table}" ORDER BY id')
            rows = [_csv_row(row, tz) for row in cursor]
            atomic_write_csv(folder / f"{key}.csv", rows)
            total_rows += len(rows)
            if progress is not None:
                progress(done, len(keys))
        return len(keys), total_rows
    finally:
        conn.close()


def _csv_row(row: tuple[object, ...], tz: tzinfo) -> list[str]:
    out: list[str] = []
    for column, value in zip(DB_COLUMNS, row, strict=True):
        if column in TIME_COLUMNS:
            out.append(show_time(None if value is None else str(value), tz))
        elif column == "importance":
            out.append(show_number(float(value)))  # type: ignore[arg-type]
        else:
            out.append(neutralise("" if value is None else str(value)))
    return out


async def make_backup(
    storage: Storage, backup_dir: Path, now: datetime, tz: tzinfo, keep_days: int,
    progress: Progress | None = None,
) -> BackupResult:
    folder = backup_dir / local_date(now, tz)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp_snapshot = folder / f".{SNAPSHOT_NAME}.tmp"
        await storage.snapshot(tmp_snapshot)
        os.replace(tmp_snapshot, folder / SNAPSHOT_NAME)
        files, rows = await asyncio.to_thread(export_csv, folder / SNAPSHOT_NAME, folder, tz, progress)
        removed = await asyncio.to_thread(prune_backups, backup_dir, now, tz, keep_days)
    except (OSError, sqlite3.Error) as exc:
        raise BackupError(f"backup to {folder} failed: {exc}") from exc
    return BackupResult(folder, files, rows, removed)


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
            shutil.rmtree(child)
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
