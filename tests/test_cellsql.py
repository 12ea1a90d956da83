"""The backup's cells formatted in SQL by SQLite's snapshot reader equal the same rules applied in Python
to a ``Memory`` (``csvformat.backup_row``, what a backup streamed from any other store writes), in a zone
with a fixed offset (SQL shifts the times) and in one with daylight saving time (Python converts them);
a backup streamed through a store without files writes the same files."""

from __future__ import annotations

import contextlib
import csv
import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.core.csvformat import CELLS, backup_row, fixed_offset, zone_name
from companion.core.models import Memory, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import make_backup
from companion.storage.base import MemoryStore
from companion.storage.factory import open_store
from companion.storage.inmemory import InMemoryStore
from companion.storage.maintenance import open_snapshot
from companion.storage.postgres.csvcells import pages
from companion.storage.sqlite import SQLiteStore
from tests.pgtest import pg_schema

NOW = datetime(2025, 12, 23, 4, 0, 7, tzinfo=UTC)
ALICE = Scope(101, -100555)


def memories() -> list[Memory]:
    base = Memory(
        id=1, event="=1+1 喜欢奶茶", keywords=["-负号", "奶茶"], importance=61.23456789, created_at=NOW,
        validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=NOW + timedelta(hours=3), expires_at=None,
        type=MemoryType.PREFERENCE, origin=Origin.EXPLICIT, mention_count=2, last_decay_at=NOW, terms=["奶茶"],
        status=Status.ACTIVE, tier=Tier.MEDIUM, review_at=NOW + timedelta(days=7), last_accessed_at=None,
        access_count=0, pinned=True, source_chat_id=-100555, source_message_id=42, source_at=NOW,
        superseded_by=None, status_reason="", fingerprint="",
    )
    return [
        base,
        replace(base, id=2, event="普通的一句\t带制表符", keywords=["@at"], importance=0.1, pinned=False,
                validity=Validity.PERMANENT, tier=Tier.LONG, expires_at=NOW + timedelta(days=400),
                last_mentioned_at=NOW - timedelta(days=200), source_chat_id=None, source_message_id=None),
        replace(base, id=3, status=Status.SUPERSEDED, superseded_by=2, status_reason="reworded",
                type=MemoryType.INSTRUCTION, origin=Origin.RESTORE),
        replace(base, id=4, event="", keywords=[], importance=0.0, status=Status.FORGOTTEN, status_reason="user",
                fingerprint="+abc", type=MemoryType.EVENT, origin=Origin.ADMIN),
        replace(base, id=5, status=Status.ARCHIVED, status_reason="'quoted", importance=100.0,
                validity=Validity.DAYS_7, tier=Tier.SHORT, last_accessed_at=NOW + timedelta(days=190)),
    ]


def as_csv(rows: list[list[object]] | list[tuple[object, ...]]) -> bytes:
    out = io.StringIO(newline="")
    csv.writer(out).writerows(rows)
    return out.getvalue().encode("utf-8")


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "Europe/Berlin", "America/St_Johns"])
async def test_sql_cells_equal_the_python_cells(tmp_path: Path, zone: str) -> None:
    tz = ZoneInfo(zone)
    store = await SQLiteStore.open(tmp_path / "m.sqlite3")
    try:
        await store.import_rows(ALICE, memories(), NOW)
        stored = await store.fetch_memories(ALICE, set(Status))
        await store.snapshot(tmp_path / "snap.sqlite3")
    finally:
        await store.close()
    offset = fixed_offset(tz, NOW)
    assert (offset is None) == (zone != "Asia/Shanghai")
    with open_snapshot(tmp_path / "snap.sqlite3") as reader:
        sql = [(*row, zone_name(tz)) for row in reader.cell_rows(ALICE, CELLS, tz, offset)]
    python = [backup_row(m, tz) for m in stored]
    assert len(sql) == 5 and as_csv(sql) == as_csv(python)


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "America/St_Johns"])
@pytest.mark.parametrize("backend", ["memory", "postgresql"])
async def test_a_store_without_files_backs_up_the_same_csv_files_by_streaming(
    tmp_path: Path, backend: str, zone: str,
) -> None:
    """The nightly backup of a store with no database file (``maintenance()`` is None) streams its cells
    through the store (PostgreSQL formats them in SQL, across scopes): the same CSV files, byte for byte, as
    the SQLite snapshot's."""
    tz = ZoneInfo(zone)
    bob = Scope(202)
    async with contextlib.AsyncExitStack() as stack:
        sqlite = await SQLiteStore.open(tmp_path / "m.sqlite3")
        stack.push_async_callback(sqlite.close)
        if backend == "postgresql":
            other: MemoryStore = await open_store(await stack.enter_async_context(pg_schema()))
            stack.push_async_callback(other.close)
        else:
            other = InMemoryStore()
        results = []
        for store, name in ((sqlite, "sqlite"), (other, "streamed")):
            await store.import_rows(ALICE, memories(), NOW)
            await store.import_rows(bob, [replace(m, id=m.id + 10) for m in memories()[:2]], NOW)
            await store.set_active(Scope(303), True, NOW)  # registered, no memories: a file of headers alone
            results.append(await make_backup(MaintenancePort(store), tmp_path / name, NOW, tz, keep_days=7))
    files, streamed = results
    assert (streamed.files, streamed.rows, streamed.users) == (files.files, files.rows, files.users) == (3, 7, 3)
    assert sorted(p.name for p in streamed.folder.iterdir()) == sorted(
        f"{s.key}.csv" for s in (ALICE, bob, Scope(303)))
    for path in streamed.folder.iterdir():
        assert path.read_bytes() == (files.folder / path.name).read_bytes()


def test_postgresql_pages_hold_whole_scopes_of_about_a_batch() -> None:
    """A page of the PostgreSQL backup is whole scopes up to ``batch`` rows; a larger scope is a page alone."""
    sizes = [(1, 0, 3), (2, -5, 3), (3, 0, 10), (4, 0, 1)]
    assert pages(sizes, 6) == [([1, 2], [0, -5]), ([3], [0]), ([4], [0])]
    assert pages(sizes, 100) == [([1, 2, 3, 4], [0, -5, 0, 0])]
    assert pages([], 6) == []
