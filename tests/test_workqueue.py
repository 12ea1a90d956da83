"""The shard queue against a real Redis (companion/ops/workers/workqueue.py): order per shard, acknowledgement and
the cursor, a takeover after a worker dies replays only what was not acknowledged, a fair share among 2-3
workers as they join and leave, the scheduled jobs' lead. Short leases keep the takeovers quick."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from companion.ops.workers.redisleader import RedisLeader
from companion.ops.workers.workqueue import LEASE_MS as DEFAULT_LEASE_MS
from companion.ops.workers.workqueue import RENEW_SECONDS as DEFAULT_RENEW
from companion.ops.workers.workqueue import (
    SHARDS,
    Entry,
    LeaseLost,
    QueueKeys,
    ShardWorker,
    UpdateQueue,
    connect,
    shard_of,
)
from tests.redistest import SERVER

LEASE_MS = 600
QUICK = {"lease_ms": LEASE_MS, "renew_seconds": 0.1, "block_ms": 50}


@pytest.fixture
async def redis(redis_prefix: str) -> AsyncIterator[Redis]:
    client = connect(SERVER)
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def running(redis: Redis, prefix: str, name: str, **options: int | float) -> AsyncIterator[ShardWorker]:
    worker = ShardWorker(redis, prefix, worker_id=name, **{**QUICK, **options})  # type: ignore[arg-type]
    await worker.start()
    try:
        yield worker
    finally:
        await worker.stop()


async def eventually(check: Callable[[], Awaitable[bool]], what: str, tries: int = 200) -> None:
    for _ in range(tries):
        if await check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def read_all(worker: ShardWorker, count: int) -> list[Entry]:
    got: list[Entry] = []
    for _ in range(100):
        got.extend(await worker.read())
        if len(got) >= count:
            break
    return got


def die(worker: ShardWorker) -> None:
    """As ``kill -9`` leaves it: the leases are not renewed and not released."""
    worker._stopping.set()


async def put_updates(queue: UpdateQueue, chats: list[int], per_chat: int) -> dict[int, list[bytes]]:
    sent: dict[int, list[bytes]] = {chat: [] for chat in chats}
    update_id = 0
    for n in range(per_chat):
        for chat in chats:
            update_id += 1
            payload = f"{chat}:{n}".encode()
            assert await queue.put(chat, update_id, payload) is not None
            sent[chat].append(payload)
    return sent


def by_chat(entries: list[Entry]) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    for entry in entries:
        got.setdefault(int(entry.payload.split(b":")[0]), []).append(entry.payload)
    return got


async def test_one_worker_reads_every_chat_in_order_and_the_cursor_moves_over_what_is_acknowledged(
    redis: Redis, redis_prefix: str
) -> None:
    queue, keys = UpdateQueue(redis, redis_prefix), QueueKeys(redis_prefix)
    chats = list(range(1000, 1040))
    sent = await put_updates(queue, chats, 5)
    assert await queue.put(chats[0], 1, b"again") is None, "an update delivered twice is queued once"
    async with running(redis, redis_prefix, "w1") as worker:
        assert worker.held() == frozenset(range(SHARDS))
        entries = await read_all(worker, 200)
        assert by_chat(entries) == sent

        shard = shard_of(chats[0])
        mine = [entry for entry in entries if entry.shard == shard]
        first, second, third = mine[:3]
        await worker.ack(second)  # out of order: remembered, the cursor stays
        assert await redis.get(keys.cursor(shard)) is None
        assert await redis.smembers(keys.done(shard)) == {second.id.encode()}
        await worker.ack(first)  # the prefix is whole: the cursor passes both
        assert (await redis.get(keys.cursor(shard))) == second.id.encode()
        assert await redis.smembers(keys.done(shard)) == set()
        await worker.ack(third)
        assert (await redis.get(keys.cursor(shard))) == third.id.encode()
        for entry in entries:
            if entry not in (first, second, third):
                await worker.ack(entry)
        assert worker.open_count() == 0
        # Acknowledged entries are trimmed: the stream keeps only the one at the cursor.
        assert await redis.xlen(keys.stream(shard)) == 1


async def test_a_takeover_replays_only_what_the_dead_worker_did_not_acknowledge(
    redis: Redis, redis_prefix: str
) -> None:
    queue = UpdateQueue(redis, redis_prefix)
    chats = list(range(2000, 2016))
    sent = await put_updates(queue, chats, 6)
    dead = ShardWorker(redis, redis_prefix, worker_id="dead", **QUICK)  # type: ignore[arg-type]
    await dead.start()
    entries = await read_all(dead, 96)
    # Every third acknowledged, so some shards have gaps (kept in the done set) before the cursor catches up.
    acked = entries[::3]
    for entry in acked:
        await dead.ack(entry)
    die(dead)

    async with running(redis, redis_prefix, "heir") as heir:
        await eventually(lambda: _holds_all(heir), "the heir holds every shard")
        replayed = await read_all(heir, len(entries) - len(acked))
        assert sorted(e.id for e in replayed) == sorted(e.id for e in entries if e not in acked)
        expected = {chat: [p for p in payloads if p not in {e.payload for e in acked}]
                    for chat, payloads in sent.items()}
        assert by_chat(replayed) == {chat: p for chat, p in expected.items() if p}, "order per chat kept"
        assert await heir.read() == [], "nothing more"

        # The dead worker, back from a long stall, can no longer move the heir's cursor.
        late = next(e for e in entries if e not in acked)
        with pytest.raises(LeaseLost):
            await dead.ack(late)


async def _holds_all(worker: ShardWorker) -> bool:
    return worker.held() == frozenset(range(SHARDS))


async def test_workers_share_the_shards_fairly_as_they_join_and_leave(redis: Redis, redis_prefix: str) -> None:
    workers: dict[str, ShardWorker] = {}

    async def shared_by(names: set[str]) -> bool:
        held = [workers[name].held() for name in names]
        total = sum(len(h) for h in held)
        union = frozenset().union(*held)
        fair = all(len(h) in (SHARDS // len(names), -(-SHARDS // len(names))) for h in held)
        return total == SHARDS and union == frozenset(range(SHARDS)) and fair

    async with contextlib.AsyncExitStack() as stack:
        for name in ("a", "b"):
            workers[name] = await stack.enter_async_context(running(redis, redis_prefix, name))
        await eventually(lambda: shared_by({"a", "b"}), "two workers hold 16 shards each")
        workers["c"] = await stack.enter_async_context(running(redis, redis_prefix, "c"))
        await eventually(lambda: shared_by({"a", "b", "c"}), "a third joins: 11, 11, 10")
        await workers["b"].stop()  # leaves cleanly: its shards are free at once
        await eventually(lambda: shared_by({"a", "c"}), "b left: 16 each again")
        die(workers["a"])  # dies: its shards come free when the leases expire
        await eventually(lambda: _holds_all(workers["c"]), "c holds everything")


async def test_a_shard_is_handed_on_only_once_its_open_entries_are_acknowledged(
    redis: Redis, redis_prefix: str
) -> None:
    queue = UpdateQueue(redis, redis_prefix)
    await put_updates(queue, list(range(3000, 3032)), 2)
    async with running(redis, redis_prefix, "a") as first:
        entries = await read_all(first, 64)
        busy = {entry.shard for entry in entries}
        odd = {shard for shard in range(SHARDS) if shard % 2}  # b's share ("a" < "b")
        assert busy & odd and odd - busy, "the test needs both kinds"
        async with running(redis, redis_prefix, "b") as second:

            async def handed_idle() -> bool:
                return first.held() == (frozenset(range(SHARDS)) - odd) | busy and second.held() == odd - busy

            await eventually(handed_idle, "a hands on the idle shards and keeps those with open entries")
            assert await first.read() == [], "a reads nothing more from shards it hands on"
            for entry in entries:
                await first.ack(entry)
            await eventually(lambda: _split(first, second), "then the shards are split")
            assert await second.read() == [], "b does not read again what a acknowledged"


async def test_a_shard_is_not_handed_on_while_an_acknowledgement_is_on_its_way(
    redis: Redis, redis_prefix: str
) -> None:
    """The last open entry's acknowledgement has left but Redis has not answered it: releasing the shard now
    could reach Redis first (another connection), and the next owner would read that entry again."""
    queue = UpdateQueue(redis, redis_prefix)
    await put_updates(queue, list(range(5000, 5032)), 2)
    async with running(redis, redis_prefix, "a") as first:
        entries = await read_all(first, 64)
        odd = sorted({entry.shard for entry in entries if entry.shard % 2})  # b's share ("a" < "b")
        assert odd, "the test needs an entry in b's share"
        slow = odd[0]
        *others, last = [entry for entry in entries if entry.shard == slow]
        for entry in entries:
            if entry.shard != slow:
                await first.ack(entry)
        for entry in others:
            await first.ack(entry)
        gate = asyncio.Event()
        real = first._ack

        async def held_up(**kwargs: object) -> object:
            await gate.wait()
            return await real(**kwargs)  # type: ignore[arg-type]

        first._ack = held_up  # type: ignore[assignment]
        acking = asyncio.create_task(first.ack(last))
        async with running(redis, redis_prefix, "b") as second:
            await eventually(lambda: _holds(second, set(range(1, SHARDS, 2)) - {slow}), "b takes the idle shards")
            await asyncio.sleep(0.5)  # several rounds of leases
            assert slow in first.held() and slow not in second.held(), "handed on before the ack was answered"
            gate.set()
            await acking
            await eventually(lambda: _split(first, second), "then the shard is handed on")
            assert await second.read() == [], "b does not read again what a acknowledged"


async def _holds(worker: ShardWorker, shards: set[int]) -> bool:
    return worker.held() == frozenset(shards)


async def _split(one: ShardWorker, other: ShardWorker) -> bool:
    return len(one.held()) == len(other.held()) == SHARDS // 2


async def test_a_thousand_acknowledgements_at_once_wait_for_connections(redis: Redis, redis_prefix: str) -> None:
    queue = UpdateQueue(redis, redis_prefix)
    await put_updates(queue, list(range(4000, 4100)), 10)
    # The shipped lease, not the quick one of the other tests: a thousand acknowledgements queue for the
    # pool's connections ahead of the renewal, longer than 600 ms on a busy machine.
    async with running(redis, redis_prefix, "w", lease_ms=DEFAULT_LEASE_MS, renew_seconds=DEFAULT_RENEW) as worker:
        entries = await read_all(worker, 1000)
        await asyncio.gather(*(worker.ack(entry) for entry in entries))
        assert worker.open_count() == 0


async def test_one_process_leads_and_another_takes_over_when_it_goes(redis: Redis, redis_prefix: str) -> None:
    one = RedisLeader(redis, redis_prefix, "one", lease_ms=LEASE_MS, renew_seconds=0.1)
    two = RedisLeader(redis, redis_prefix, "two", lease_ms=LEASE_MS, renew_seconds=0.1)
    await one.start()
    await two.start()
    try:
        assert [await one.leads(), await two.leads()] == [True, False]
        await one.stop()
        assert await two.leads()
        assert not await one.leads()
    finally:
        await two.stop()
