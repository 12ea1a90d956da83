"""What the operator tools do to a whole database, behind one narrow door (``MaintenancePort``): the nightly
backup's reads (the scopes, the CSV lines a store renders, a snapshot of a database file), the background
upgrade of old tables, restore's row import and re-forgetting, the listing of a user's memories, and the
copy of one database into another (``migrate``). ``open_database(url)`` opens one by URL for the offline
tools (backup, restore, migrate, memories); ``database_file`` and ``file_url`` read and make SQLite's URLs.
Snapshot files themselves are read through ``engine.snapshots``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

from companion.core.cells import CellColumn
from companion.core.errors import StorageError
from companion.core.models import ACTIVE_ONLY, Memory, Scope, Status
from companion.engine.migration import Copied, Progress, migrate
from companion.storage.base import MemoryStore
from companion.storage.factory import open_store, sqlite_path, sqlite_url


class MaintenancePort:
    """Whole-database work on one store; the store stays the caller's (``open_database`` closes its own)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    # ---- reading -----------------------------------------------------------------------------------

    async def scopes(self) -> list[Scope]:
        return await self._store.scopes()

    async def memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        return await self._store.fetch_memories(scope, statuses)

    def stream_csv(
        self, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None, tail: Sequence[str] = (),
    ) -> AsyncIterator[tuple[Scope, str, int]]:
        """Every memory of every scope as a line of CSV (``MemoryRecords.stream_csv``): (scope, lines, count)."""
        return self._store.stream_csv(columns, tz, offset, tail)

    # ---- the database file -------------------------------------------------------------------------

    @property
    def in_a_file(self) -> bool:
        """Whether the database is one file a snapshot can copy (SQLite), rather than a server's."""
        return self._store.maintenance() is not None

    async def snapshot(self, target: Path, *, standalone: bool = True) -> None:
        """A consistent copy of the whole database file at ``target``; StorageError for a server database."""
        files = self._store.maintenance()
        if files is None:
            raise StorageError("this database is kept in no file: there is nothing to snapshot")
        await files.snapshot(target, standalone=standalone)

    async def upgrade_stale(self, limit: int) -> int:
        """Upgrade up to ``limit`` rows of tables left at an old schema; 0 when none is left (or none can be)."""
        files = self._store.maintenance()
        return 0 if files is None else await files.upgrade_stale(limit)

    # ---- writing -----------------------------------------------------------------------------------

    async def import_rows(self, scope: Scope, memories: Sequence[Memory], now: datetime, *,
                          keep_ids: bool = True) -> list[int]:
        """Write memories with their times as they are (restore); returns their handles."""
        return await self._store.import_rows(scope, memories, now, keep_ids=keep_ids)

    async def forget(self, scope: Scope, ids: Sequence[int], now: datetime, reason: str) -> None:
        """The one forget path: tombstones, and with them whatever could bring the memories back."""
        await self._store.forget_everywhere(scope, ids, now, reason)

    async def copy_into(self, target: MaintenancePort, now: datetime, progress: Progress | None = None) -> Copied:
        """What ``target`` lacks of this database, copied and verified (``migration.migrate``)."""
        return await migrate(self._store, target._store, now, progress)


@asynccontextmanager
async def open_database(url: str, *, copying: bool = False) -> AsyncIterator[MaintenancePort]:
    """The database ``url`` names, open for the operator tools and closed on the way out. ``copying``: the
    target of a copy, which may be an unfinished one (``factory.open_store``)."""
    store = await open_store(url, copying=copying)
    try:
        yield MaintenancePort(store)
    finally:
        await store.close()


def database_file(url: str) -> Path | None:
    """The file a ``sqlite:///`` URL names, or None for a server database; ConfigError for no URL at all."""
    return sqlite_path(url)


def file_url(path: Path) -> str:
    """The URL of the SQLite database file at ``path``."""
    return sqlite_url(path)
