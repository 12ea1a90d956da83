"""Daily maintenance inside the bot process: decay and cleanup, then the nightly backup.

Each job runs through ``guarded``: a failure is logged with its traceback and the bot carries on; a
scheduled one through ``led``, only in the process that leads (``companion.ops.jobs.leader``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import date, datetime, time, timedelta, tzinfo
from pathlib import Path

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from companion.config.settings import Settings
from companion.core.errors import LLMError
from companion.core.timeutil import utcnow
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import IN_PROGRESS, SNAPSHOT_NAME, BackupResult
from companion.ops.backup.stoppable import stoppable_backup
from companion.ops.jobs.leader import ALONE, Leader
from memory import DecayReport, MemoryEngine

log = logging.getLogger(__name__)


async def guarded(name: str, job: Callable[[], Awaitable[object]]) -> None:
    try:
        result = await job()
    except Exception:
        # The job wrapper is an edge: nothing above it would see the error, so log it whole.
        log.exception("job %s failed; the bot keeps running", name)
        return
    log.info("job %s done: %s", name, result)


async def led(leader: Leader, name: str, job: Callable[[], Awaitable[object]]) -> None:
    """``guarded``, in the process that leads; another process leaves the job to it."""
    if not await leader.leads():
        log.debug("job %s left to the leading process", name)
        return
    await guarded(name, job)


async def run_decay(engine: MemoryEngine, now: datetime | None = None) -> DecayReport:
    """Extract what is still queued (the model may have been down), then decay and clean up."""
    now = now or utcnow()
    pending = await engine.scopes_with_pending() if engine.can_extract else []
    for scope in pending:
        try:
            await engine.consolidate(scope, now)
        except LLMError as exc:
            log.warning("catch-up extraction for %s failed, turns stay queued: %s", scope.key, exc)
    return await engine.decay(now)


async def run_backup(database: MaintenancePort, settings: Settings, now: datetime | None = None) -> BackupResult:
    result = await stoppable_backup(database, Path(settings.backup_dir), now or utcnow(), settings.tz,
                                    settings.backup_keep_days)
    if result.damaged:
        log.error("backup %s left out %d scopes that could not be read: %s", result.folder.name,
                  len(result.damaged), "; ".join(result.damaged))
    return result


async def run_decay_once(engine: MemoryEngine, tz: tzinfo, now: datetime | None = None) -> DecayReport | str:
    """The scheduled decay, unless one already ran this local day: the lead may pass to another process
    after its decay ran (the store's record is what several schedulers agree on)."""
    now = now or utcnow()
    last = await engine.last_decay_at()
    if last is not None and last.astimezone(tz).date() == now.astimezone(tz).date():
        return f"already ran today at {last.astimezone(tz):%H:%M}"
    return await run_decay(engine, now)


async def decay_is_overdue(engine: MemoryEngine, now: datetime) -> bool:
    last = await engine.last_decay_at()
    return last is None or now - last >= timedelta(days=1)


SPOOL_REPLAY_SECONDS = 60.0


def schedule_spool_replay(scheduler: AsyncIOScheduler, replay: Callable[[], Awaitable[int]],
                          every: float = SPOOL_REPLAY_SECONDS) -> None:
    """Every process, not only the leader, replays spooled turns (``ChatService.replay_spools``): at start,
    then every ``every`` seconds, so what users said while the database was out reaches it once it is back.
    Each spool file is held by one process at a time, so two replays never queue a turn twice."""

    async def job() -> None:
        try:
            await replay()
        except Exception:  # a job wrapper is an edge: nothing above it would see the error
            log.exception("replaying spooled turns failed; the next run tries again")

    scheduler.add_job(job, IntervalTrigger(seconds=every), id="spool-replay", coalesce=True, max_instances=1,
                      next_run_time=datetime.now(scheduler.timezone))


def build_scheduler(
    engine: MemoryEngine, database: MaintenancePort, settings: Settings, leader: Leader = ALONE
) -> AsyncIOScheduler:
    """Decay through the engine; the backup through the maintenance port (the composition root hands both).
    Each job runs only where ``leader`` says this process leads."""
    scheduler = AsyncIOScheduler(timezone=settings.tz)

    async def decay_job() -> None:
        await led(leader, "decay", lambda: run_decay_once(engine, settings.tz))

    async def backup_job() -> None:
        await led(leader, "backup", lambda: run_backup(database, settings))

    options = {"coalesce": True, "misfire_grace_time": 6 * 3600, "max_instances": 1}
    scheduler.add_job(
        decay_job, CronTrigger(hour=settings.decay_time.hour, minute=settings.decay_time.minute,
                               timezone=settings.tz), id="decay", **options,
    )
    scheduler.add_job(
        backup_job, CronTrigger(hour=settings.backup_time.hour, minute=settings.backup_time.minute,
                                timezone=settings.tz), id="backup", **options,
    )
    return scheduler


def newest_backup_day(backup_dir: Path) -> date | None:
    """The newest ``YYYY-MM-DD`` folder that holds a finished backup; other folders are not backups, nor is
    a day whose run was cut short (still marked in progress: the catch-up must run again)."""
    days = []
    for child in backup_dir.glob(f"*/{SNAPSHOT_NAME}"):
        if (child.parent / IN_PROGRESS).exists():
            continue
        try:
            days.append(date.fromisoformat(child.parent.name))
        except ValueError:
            continue
    return max(days, default=None)


def backup_is_overdue(newest: date | None, now: datetime, tz: tzinfo, at: time) -> bool:
    """Whether the last scheduled backup (``at`` local time, at or before ``now``) has no day folder yet."""
    local = now.astimezone(tz)
    due_day = local.date() if local.time() >= at else local.date() - timedelta(days=1)
    return newest is None or newest < due_day


async def catch_up(engine: MemoryEngine, database: MaintenancePort, settings: Settings, leader: Leader = ALONE) -> None:
    """At startup: a decay missed while the bot was down runs now (whole days, so nothing doubles), then
    a missed nightly backup, so a bot that was down at night still has last night's backup. Only in the
    process that leads."""
    now = utcnow()
    if await decay_is_overdue(engine, now):
        await led(leader, "decay catch-up", lambda: run_decay(engine, now))
    if backup_is_overdue(newest_backup_day(Path(settings.backup_dir)), now, settings.tz, settings.backup_time):
        await led(leader, "backup catch-up", lambda: run_backup(database, settings))
