"""Background upgrade of memory tables left at an old schema version: small batches, each one short
transaction, the event loop free between them, so start-up never waits for it and chats keep flowing."""

from __future__ import annotations

import asyncio
import logging

from companion.core.errors import StorageError
from companion.engine.maintenance_port import MaintenancePort

log = logging.getLogger(__name__)

BATCH = 50
PAUSE_SECONDS = 0.05


async def upgrade_tables(database: MaintenancePort, batch: int = BATCH, pause: float = PAUSE_SECONDS) -> int:
    """Upgrade every stale memory table; returns how many batches ran (none for a database kept in no file,
    which has no schema-versioned tables). A failure stops the run with one warning (the tables are upgraded
    when touched anyway)."""
    rounds = 0
    try:
        while await database.upgrade_stale(batch):
            rounds += 1
            await asyncio.sleep(pause)
    except StorageError as exc:
        log.warning("background table upgrade stopped: %s", exc)
    return rounds
