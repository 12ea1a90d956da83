"""A backup that stops when it is told to: the nightly job, the start-up catch-up and ``bot.py backup``.

Kept apart from the scheduler (companion.ops.jobs.scheduled) so the command line imports no scheduler or engine.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, tzinfo
from pathlib import Path

from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import BackupResult, BackupStopped, Progress, make_backup

__all__ = ["BackupStopped", "stoppable_backup"]


async def stoppable_backup(
    database: MaintenancePort, backup_dir: Path, now: datetime, tz: tzinfo, keep_days: int,
    progress: Progress | None = None,
) -> BackupResult:
    """``make_backup``, whose CSV export thread also stops when the run is cancelled (SIGTERM, Ctrl-C).

    Cancelling the coroutine alone leaves the thread writing every file, and the process's exit waits for
    it (asyncio.run joins its worker threads): minutes for a large database. The day folder keeps its
    in-progress marker, so restore never takes the cut-short folder for a backup."""
    stop = threading.Event()

    def report(done: int, total: int) -> None:
        if stop.is_set():
            raise BackupStopped("backup stopped before every file was written")
        if progress is not None:
            progress(done, total)

    try:
        return await make_backup(database, backup_dir, now, tz, keep_days, report, stop)
    except asyncio.CancelledError:
        stop.set()
        raise
