"""The update queue alone (``companion.ops.workers.workqueue`` on a real Redis): how many updates a second one
receiving side can add and ``--workers`` workers can read and acknowledge, without the bot's work, so the
deployment plan knows how far one Redis carries (docs/deployment.md).

``python -m bench queue [--updates 20000] [--chats 2000] [--workers 2] [--redis redis://127.0.0.1:6379/0]``
prints one JSON object; every key it wrote is deleted after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from companion.ops.workers.workqueue import ShardWorker, UpdateQueue, connect


async def measure(url: str, updates: int, chats: int, workers: int) -> dict[str, Any]:
    redis = connect(url)
    prefix = f"benchq{uuid.uuid4().hex[:8]}"
    try:
        queue = UpdateQueue(redis, prefix)
        payload = b'{"update_id":0,"message":{"text":"' + "今天去散步了".encode() * 4 + b'"}}'
        begin = time.perf_counter()
        # As the webhook adds them: many requests in flight at once, each one script call.
        await asyncio.gather(*(queue.put(n % chats, n, payload) for n in range(updates)))
        put_seconds = time.perf_counter() - begin

        readers = [ShardWorker(redis, prefix) for _ in range(workers)]
        for reader in readers:
            await reader.start()
        for reader in readers:  # a second round: each now sees the others and keeps its fair share only
            await reader.rebalance()
        handled = 0
        begin = time.perf_counter()

        async def drain(reader: ShardWorker) -> None:
            nonlocal handled
            idle = 0
            while idle < 2:
                entries = await reader.read()
                idle = 0 if entries else idle + 1
                await asyncio.gather(*(reader.ack(entry) for entry in entries))
                handled += len(entries)

        await asyncio.gather(*(drain(reader) for reader in readers))
        # The last two empty reads waited out the block time each; they are not the queue's work.
        read_seconds = time.perf_counter() - begin - 2 * readers[0]._block_ms / 1000
        for reader in readers:
            await reader.stop()
        return {"updates": updates, "chats": chats, "workers": workers, "handled": handled,
                "put_per_s": round(updates / put_seconds), "read_and_ack_per_s": round(handled / read_seconds)}
    finally:
        keys = [key async for key in redis.scan_iter(match=f"{prefix}:*", count=1000)]
        for start in range(0, len(keys), 1000):
            await redis.delete(*keys[start:start + 1000])
        await redis.aclose()


def run_command(args: argparse.Namespace) -> int:
    print(json.dumps(asyncio.run(measure(args.redis, args.updates, args.chats, args.workers))))
    return 0
