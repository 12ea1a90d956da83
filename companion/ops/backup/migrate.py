"""``python bot.py migrate --to URL`` and restore into a server database: the copy itself is the engine's
(``engine.migration``, reached as ``MaintenancePort.copy_into``); here the forgets of a database a restore
replaces, and the restore that rebuilds a backup as a SQLite file and copies it into a server database."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path

from companion.core.errors import RestoreError
from companion.core.models import Status
from companion.engine.maintenance_port import file_url, open_database
from companion.engine.migration import Progress
from companion.ops.backup.restore import LiveTombstones, RestoreResult, Tombstone, restore


async def tombstones_of(url: str) -> LiveTombstones:
    """Every forget the store at ``url`` holds (content-free: handle, fingerprint, reason, when)."""
    found = LiveTombstones()
    async with open_database(url) as database:
        for scope in await database.scopes():
            for memory in await database.memories(scope, {Status.FORGOTTEN}):
                found.add(Tombstone(scope, memory.id, memory.fingerprint, memory.status_reason, memory.updated_at))
    return found


async def restore_into(url: str, source: Path, now: datetime, *, replacing: str | None,
                       progress: Progress | None = None, tz: tzinfo | None = None) -> RestoreResult:
    """``bot.py restore`` for a store kept in no database file (PostgreSQL): the backup is rebuilt as a
    SQLite file in a temporary folder, exactly as a SQLite restore rebuilds it, then copied into the store
    at ``url`` and verified (``migrate``). The target must hold no scope yet: a server database is not
    swapped like a file, so restore into a new, empty database (or schema) and point ``DATABASE_URL`` at it.
    ``replacing``: the URL of the database the restore replaces, whose forgets (those made after the backup)
    are made again, as a SQLite restore makes those of the file it replaces; None when there is none left."""
    with tempfile.TemporaryDirectory(prefix="restore-") as tmp:
        staged = Path(tmp) / "memory.sqlite3"
        forgotten = await tombstones_of(replacing) if replacing is not None else None
        result = await restore(source, staged, now, progress=progress, tz=tz, forgotten=forgotten)
        async with open_database(url, copying=True) as target:
            if await target.scopes():
                raise RestoreError("the database at DATABASE_URL already holds memories; restore into a new, "
                                   "empty database (or schema) and point DATABASE_URL at it")
            async with open_database(file_url(staged)) as copy:
                await copy.copy_into(target, now)
    return replace(result, kept_old=None, pruned=())
