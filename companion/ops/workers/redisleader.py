"""The ``Leader`` of several worker processes sharing one Redis: whoever holds the ``<prefix>:leader`` lease.

The lease is taken when free and renewed by its holder every few seconds, so one live process leads and
another takes over within the lease time after it dies. A job that must run once a day also checks a
durable record (decay: the store's last decay time), since a takeover can come after the job already ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from companion.ops.workers.workqueue import LEASE_MS, RENEW_SECONDS, QueueKeys, stopped_within

log = logging.getLogger(__name__)

# KEYS: lease; ARGV: holder, milliseconds. Take the lease when free, renew it when held: 1 if held now.
_HOLD = """
local holder = redis.call('GET', KEYS[1])
if holder == false then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0
"""
_RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0"


class RedisLeader:
    """Implements ``companion.ops.jobs.leader.Leader``."""

    def __init__(self, redis: Redis, prefix: str, holder: str, *, lease_ms: int = LEASE_MS,
                 renew_seconds: float = RENEW_SECONDS) -> None:
        self._key = QueueKeys(prefix).leader
        self.holder, self.lease_ms, self.renew_seconds = holder, lease_ms, renew_seconds
        self._hold = redis.register_script(_HOLD)
        self._release = redis.register_script(_RELEASE)
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def leads(self) -> bool:
        try:
            return bool(await self._hold(keys=[self._key], args=[self.holder, self.lease_ms]))
        except RedisError as exc:
            # Nobody can be sure to lead without Redis: a job left out runs at its next time (or catch-up).
            log.warning("leader: Redis unreachable, this process does not lead: %s", exc)
            return False

    async def start(self) -> None:
        await self.leads()
        self._task = asyncio.create_task(self._keep(), name=f"leader-{self.holder}")

    async def _keep(self) -> None:
        while not await stopped_within(self._stopping, self.renew_seconds):
            await self.leads()

    async def stop(self) -> None:
        """Hand the lead on at once instead of after the lease time."""
        self._stopping.set()
        if self._task is not None:
            await self._task
        with contextlib.suppress(RedisError):
            await self._release(keys=[self._key], args=[self.holder])
