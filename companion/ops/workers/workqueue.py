"""Updates shared by several worker processes through Redis Streams, one chat's updates in order.

The receiving process adds each update to one of ``SHARDS`` streams, chosen by a stable hash of its chat
id (``UpdateQueue.put``), so one chat's updates stay in one stream, in order. Each worker holds leases on
a fair share of the shards (``SET lease worker NX PX``, renewed every ``renew_seconds``; live workers are
the members of a sorted set whose heartbeat is recent) and reads only those shards (``ShardWorker``).

An entry is acknowledged when its effects are done (the caller says so). Acknowledged ids go to the
shard's done set; the shard's cursor moves over the contiguous acknowledged prefix and the stream is
trimmed behind it. A worker that takes a shard over (the old lease expired: that worker died) reads from
the cursor and skips what the done set holds, so a worker killed mid-turn loses nothing and nothing
acknowledged is handled twice. One shard has one reader at a time, so the per-user message buffer of the
reading process sees a user's whole burst.

Every write of a shard's state checks the lease in the same script: a worker that lost its lease (it
stalled longer than the lease) can no longer move the cursor under the new owner.

This module knows nothing of Telegram: entries are opaque payloads with a chat id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

from companion.core.errors import CompanionError

log = logging.getLogger(__name__)

SHARDS = 32  # fixed for a deployment: changing it would move chats between streams mid-conversation
LEASE_MS = 10_000
RENEW_SECONDS = 3.0
READ_BLOCK_MS = 1_000
READ_BATCH = 200
MAX_OPEN = 5_000  # entries read and not yet acknowledged, per worker: reading pauses above this

# Telegram delivers an update again when it did not see it confirmed: polling restarted before the next
# getUpdates, a webhook answer lost on the way. Within this many seconds the second delivery is dropped.
SEEN_SECONDS = 3_600
# KEYS: seen marker, stream; ARGV: seconds, payload. The entry id, or false for an update seen already.
_PUT = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return false end
return redis.call('XADD', KEYS[2], '*', 'u', ARGV[2])
"""
# KEYS: lease, done, cursor, stream; ARGV: worker, id to remember as done (or ""), new cursor (or ""),
# then the ids the cursor passed (no longer needed in the done set).
# Two acknowledgements of one shard may reach Redis in either order: the cursor only ever moves forward.
_ACK = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] ~= '' then redis.call('SADD', KEYS[2], ARGV[2]) end
if #ARGV > 3 then redis.call('SREM', KEYS[2], unpack(ARGV, 4)) end
if ARGV[3] ~= '' then
  local old = redis.call('GET', KEYS[3])
  local function parts(id)
    local ms, seq = string.match(id, '(%d+)-(%d+)')
    return tonumber(ms), tonumber(seq)
  end
  local nm, ns = parts(ARGV[3])
  local om, os = 0, 0
  if old then om, os = parts(old) end
  if nm > om or (nm == om and ns > os) then
    redis.call('SET', KEYS[3], ARGV[3])
    redis.call('XTRIM', KEYS[4], 'MINID', ARGV[3])
  end
end
return 1
"""
# KEYS: lease; ARGV: worker, milliseconds. Renews (1) or deletes ("release": ms = 0) a lease held by worker.
_RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then redis.call('DEL', KEYS[1]) else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


Read = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


def connect(url: str, max_connections: int = 32) -> Redis:
    """A client whose commands wait for a free connection: hundreds of updates finishing at once each
    acknowledge, and a pool that refuses past its size (the default one) would fail those acknowledgements."""
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=30,
                                           health_check_interval=30)
    return Redis(connection_pool=pool)


def shard_of(chat_id: int, shards: int = SHARDS) -> int:
    """Stable across processes and restarts (``hash()`` of an int is too, but not of what may follow)."""
    return zlib.crc32(str(chat_id).encode()) % shards


class QueueKeys:
    """Every key under one prefix, so several bots (or tests) share one Redis without meeting."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.workers = f"{prefix}:workers"
        self.leader = f"{prefix}:leader"

    def stream(self, shard: int) -> str:
        return f"{self.prefix}:updates:{shard}"

    def lease(self, shard: int) -> str:
        return f"{self.prefix}:lease:{shard}"

    def cursor(self, shard: int) -> str:
        return f"{self.prefix}:cursor:{shard}"

    def done(self, shard: int) -> str:
        return f"{self.prefix}:done:{shard}"

    def seen(self, update_id: int) -> str:
        return f"{self.prefix}:seen:{update_id}"


class UpdateQueue:
    """The receiving side: ``put`` adds one update to its chat's shard, once per update id."""

    def __init__(self, redis: Redis, prefix: str, shards: int = SHARDS) -> None:
        self._redis, self._keys, self.shards = redis, QueueKeys(prefix), shards
        self._put = redis.register_script(_PUT)

    async def put(self, chat_id: int, update_id: int, payload: bytes) -> str | None:
        """The entry's id; None when this update was added before (Telegram delivered it again)."""
        keys = [self._keys.seen(update_id), self._keys.stream(shard_of(chat_id, self.shards))]
        try:
            entry = await self._put(keys=keys, args=[SEEN_SECONDS, payload])
        except RedisError as exc:
            raise QueueError(f"adding update {update_id} to the queue failed: {exc}") from exc
        return _text(entry) if entry else None


@dataclass(frozen=True, slots=True)
class Entry:
    shard: int
    id: str
    payload: bytes


@dataclass(slots=True)
class _Shard:
    position: str  # the last id read
    skip: set[str]  # acknowledged by an earlier owner beyond the cursor: not handled again
    open: dict[str, bool] = field(default_factory=dict)  # read, in order -> acknowledged
    draining: bool = False  # another worker should have it: read nothing more, release once all is acked
    # Acknowledgements sent and not yet answered: the shard is released only after them, or the release
    # (on another connection) could reach Redis first and the next owner read those entries again.
    acking: int = 0


class QueueError(CompanionError):
    """Redis could not be asked (the entry stays where it was: unread, or read and not acknowledged)."""


class LeaseLost(QueueError):
    """This worker no longer holds a shard's lease (it stalled, or Redis was unreachable too long)."""


class ShardWorker:
    """One worker's side: ``start``, then ``read`` entries of the shards it holds and ``ack`` each one when
    its effects are done; ``stop`` releases the shards for the other workers at once."""

    def __init__(self, redis: Redis, prefix: str, *, shards: int = SHARDS, worker_id: str | None = None,
                 lease_ms: int = LEASE_MS, renew_seconds: float = RENEW_SECONDS,
                 block_ms: int = READ_BLOCK_MS, batch: int = READ_BATCH, max_open: int = MAX_OPEN) -> None:
        self._redis = redis
        self._keys = QueueKeys(prefix)
        self.shards = shards
        self.id = worker_id or uuid.uuid4().hex[:12]
        self.lease_ms, self.renew_seconds = lease_ms, renew_seconds
        self._block_ms, self._batch, self._max_open = block_ms, batch, max_open
        self._held: dict[int, _Shard] = {}
        self._ack = redis.register_script(_ACK)
        self._renew = redis.register_script(_RENEW)
        self._task: asyncio.Task[None] | None = None
        self._renewed_at = 0.0  # loop time of the last successful round
        self._changed = asyncio.Event()  # a round took or dropped shards: a blocked read may stop waiting
        self._stopping = asyncio.Event()
        self.on_take: Callable[[frozenset[int]], Awaitable[None]] = _nothing

    # ---- the lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.rebalance()
        self._task = asyncio.create_task(self._keep(), name=f"shard-leases-{self.id}")

    async def stop(self) -> None:
        """Leave: release every shard held (what is not acknowledged is read again by its next owner)."""
        # Not cancelled: a cancellation meeting the client's own timeout can be lost, and the round in
        # progress is short anyway.
        self._stopping.set()
        if self._task is not None:
            await self._task
        with contextlib.suppress(RedisError):
            for shard in list(self._held):
                await self._renew(keys=[self._keys.lease(shard)], args=[self.id, 0])
            await self._redis.zrem(self._keys.workers, self.id)
        self._held.clear()

    def held(self) -> frozenset[int]:
        return frozenset(self._held)

    def open_count(self) -> int:
        return sum(len(state.open) for state in self._held.values())

    async def _keep(self) -> None:
        while not await stopped_within(self._stopping, self.renew_seconds):
            try:
                await self.rebalance()
            except RedisError as exc:
                log.warning("queue: renewing shard leases failed: %s", exc)
                if asyncio.get_running_loop().time() - self._renewed_at > self.lease_ms / 1000:
                    self._drop(list(self._held), "Redis unreachable for longer than the lease")
            except Exception:
                # The edge of the leases' background task: it must keep renewing whatever one round met.
                log.exception("queue: a round of shard leases failed")

    # ---- leases and the fair share ------------------------------------------------------------------

    async def live_workers(self) -> list[str]:
        seconds, micros = await self._redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.zadd(self._keys.workers, {self.id: now_ms})
            pipe.zremrangebyscore(self._keys.workers, "-inf", now_ms - self.lease_ms)
            pipe.zrange(self._keys.workers, 0, -1)
            *_, members = await pipe.execute()
        return sorted(_text(member) for member in members)

    def wanted(self, live: list[str]) -> set[int]:
        """The shards this worker should hold: every n-th of them, n the number of live workers."""
        if self.id not in live:
            return set()
        me, n = live.index(self.id), len(live)
        return {shard for shard in range(self.shards) if shard % n == me}

    async def rebalance(self) -> None:
        """One round: heartbeat, renew what is held, give up what another worker should hold (once its
        open entries are acknowledged), take what this one should hold and nobody holds."""
        wanted = self.wanted(await self.live_workers())
        held = list(self._held)
        if held:
            async with self._redis.pipeline(transaction=False) as pipe:
                for shard in held:
                    await self._renew(keys=[self._keys.lease(shard)], args=[self.id, self.lease_ms], client=pipe)
                renewed = await pipe.execute()
            self._drop([shard for shard, ok in zip(held, renewed, strict=True) if not ok], "its lease expired")
        for shard, state in list(self._held.items()):
            if shard in wanted:
                state.draining = False
                continue
            state.draining = True
            if not state.open and not state.acking:
                await self._renew(keys=[self._keys.lease(shard)], args=[self.id, 0])
                del self._held[shard]
                log.info("queue: worker %s handed shard %d on", self.id, shard)
        taken = {}
        for shard in sorted(wanted - set(self._held)):
            if await self._redis.set(self._keys.lease(shard), self.id, nx=True, px=self.lease_ms):
                taken[shard] = await self._take(shard)
        if taken:
            # Before the first read: what the shards' chats are, as the worker that held them left it.
            await self.on_take(frozenset(taken))
            self._held.update(taken)
        self._renewed_at = asyncio.get_running_loop().time()
        self._changed.set()

    async def _take(self, shard: int) -> _Shard:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(self._keys.cursor(shard))
            pipe.smembers(self._keys.done(shard))
            cursor, done = await pipe.execute()
        position = _text(cursor) if cursor else "0-0"
        # An id at or before the cursor left in the done set (two acknowledgements crossed) is never read again.
        skip = {eid for eid in map(_text, done) if _after(eid, position)}
        log.info("queue: worker %s took shard %d from %s", self.id, shard, position)
        return _Shard(position, skip)

    def _drop(self, shards: Iterable[int], why: str) -> None:
        for shard in shards:
            if self._held.pop(shard, None) is not None:
                log.warning("queue: worker %s lost shard %d: %s", self.id, shard, why)

    # ---- reading and acknowledging -----------------------------------------------------------------

    async def read(self) -> list[Entry]:
        """The next entries of the held shards, in order per shard; waits up to the block time when there
        are none. Entries an earlier owner acknowledged are skipped."""
        readable = {shard: state for shard, state in self._held.items() if not state.draining}
        if not readable or self.open_count() >= self._max_open:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self._block_ms / 1000)
            return []
        streams = {self._keys.stream(shard): state.position for shard, state in readable.items()}
        try:
            return await self._read(streams, readable)
        except RedisError as exc:
            raise QueueError(f"reading the queue failed: {exc}") from exc

    async def _read(self, streams: dict[str, str], readable: dict[int, _Shard]) -> list[Entry]:
        # RESP2's shape (the client's default protocol): [(stream, [(id, fields), ...]), ...]
        answer = cast(Read, await self._redis.xread(streams, count=self._batch, block=self._block_ms))  # type: ignore[arg-type]
        entries: list[Entry] = []
        for key, rows in answer or []:
            shard = int(_text(key).rsplit(":", 1)[1])
            state = self._held.get(shard)
            if state is None or state is not readable[shard] or state.draining:
                continue  # handed on or lost while the read waited: its next owner reads these
            for entry_id, fields in rows:
                eid = _text(entry_id)
                state.position = eid
                if eid in state.skip:
                    state.skip.discard(eid)
                    state.open[eid] = True
                    continue
                state.open[eid] = False
                entries.append(Entry(shard, eid, fields[b"u"]))
            if not await self._advance(shard, state, None):
                entries = [entry for entry in entries if entry.shard != shard]
        return entries

    async def ack(self, entry: Entry) -> None:
        """The entry's effects are done. Raises LeaseLost when another worker holds its shard by now (it
        will handle the entry again)."""
        state = self._held.get(entry.shard)
        if state is None or entry.id not in state.open:
            raise LeaseLost(f"shard {entry.shard} is no longer held by worker {self.id}")
        state.open[entry.id] = True
        try:
            kept = await self._advance(entry.shard, state, entry.id)
        except RedisError as exc:
            raise QueueError(f"acknowledging {entry.id} of shard {entry.shard} failed: {exc}") from exc
        if not kept:
            raise LeaseLost(f"shard {entry.shard} is held by another worker")

    async def _advance(self, shard: int, state: _Shard, acked: str | None) -> bool:
        """Record ``acked`` and move the cursor over the acknowledged prefix; False when the lease is lost."""
        passed: list[str] = []
        for eid, done in state.open.items():
            if not done:
                break
            passed.append(eid)
        if not passed and acked is None:
            return True
        for eid in passed:
            del state.open[eid]
        remember = "" if acked is None or acked in passed else acked
        cursor = passed[-1] if passed else ""
        keys = [self._keys.lease(shard), self._keys.done(shard), self._keys.cursor(shard), self._keys.stream(shard)]
        state.acking += 1
        try:
            kept = await self._ack(keys=keys, args=[self.id, remember, cursor, *passed])
        finally:
            state.acking -= 1
        if kept:
            return True
        self._drop([shard], "another worker holds its lease")
        return False


async def stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds`` or until ``stopping`` is set; whether it is."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


async def _nothing(shards: frozenset[int]) -> None:
    return None


def _after(one: str, other: str) -> bool:
    """Whether stream id ``one`` comes after ``other`` ("<ms>-<seq>")."""
    a, _, b = one.partition("-")
    c, _, d = other.partition("-")
    return (int(a), int(b)) > (int(c), int(d))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
