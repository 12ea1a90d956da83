"""What the processes of one bot share when ``REDIS_URL`` is set, and the worker processes ``WORKERS``
asks ``python bot.py`` to run beside itself.

``shared`` connects to Redis (one clear line when it cannot), takes part in the scheduled jobs' lead and
gives the queue's two sides; ``worker_processes`` starts ``bot.py worker`` children and stops them
(SIGTERM, then a kill after the stop timeout) when the bot stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from companion.config.settings import Settings
from companion.ops.preflight import StartupError
from companion.ops.workers.redisleader import RedisLeader
from companion.ops.workers.workqueue import ShardWorker, UpdateQueue, connect

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass(frozen=True, slots=True)
class Shared:
    queue: UpdateQueue
    worker: ShardWorker
    leader: RedisLeader


@contextlib.asynccontextmanager
async def shared(settings: Settings) -> AsyncIterator[Shared]:
    from redis.exceptions import RedisError

    redis = connect(settings.redis_url)
    try:
        try:
            await redis.ping()
        except RedisError as exc:
            raise StartupError(f"Redis at REDIS_URL cannot be reached: {type(exc).__name__}: {exc}") from None
        worker = ShardWorker(redis, settings.redis_prefix)
        leader = RedisLeader(redis, settings.redis_prefix, worker.id)
        await leader.start()
        try:
            yield Shared(UpdateQueue(redis, settings.redis_prefix), worker, leader)
        finally:
            await leader.stop()
    finally:
        await redis.aclose()


@contextlib.asynccontextmanager
async def worker_processes(count: int, argv: Sequence[str], cwd: Path, stop_seconds: float) -> AsyncIterator[None]:
    """``count`` child processes running ``argv`` (with this process's environment) while the block runs."""
    children: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(count):
            children.append(await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=os.environ.copy(),
                                                                 preexec_fn=_stop_with_parent))
        if children:
            log.info("started %d worker processes (pids %s)", count, ", ".join(str(c.pid) for c in children))
        yield
    finally:
        for child in children:
            if child.returncode is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                await asyncio.wait_for(child.wait(), stop_seconds + 5)
            except TimeoutError:
                log.warning("worker process %d did not stop; killed", child.pid)
                child.kill()
                await child.wait()
            if child.returncode not in (0, 130, -signal.SIGTERM):
                log.warning("worker process %d ended with exit code %s", child.pid, child.returncode)


def _stop_with_parent() -> None:
    """In the child before it runs: SIGTERM when the parent dies (``kill -9`` of the bot), so a restarted
    bot does not find the old workers still running beside its new ones. Linux only; elsewhere they run on
    as workers of the queue until stopped."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def worker_command(bot_py: Path) -> list[str]:
    return [sys.executable, str(bot_py), "worker"]
