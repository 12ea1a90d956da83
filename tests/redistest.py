"""The Redis test server: every test works under a key prefix of its own (``redis_prefix``), deleted after.
``TEST_REDIS_URL`` names the server (default: the local one every session and CI run has). Without a server
the tests skip with one reason; with ``CI=true`` they fail instead, so CI can never pass without them."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from tests.servers import ask, require

SERVER = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SKIP_REASON = "Redis tests: no server at TEST_REDIS_URL (default 127.0.0.1:6379); CI=true makes this fail"


async def _probe() -> str | None:
    try:
        from redis.asyncio import Redis
        from redis.exceptions import RedisError
    except ImportError as exc:
        return f"redis is not installed ({exc})"
    client = Redis.from_url(SERVER, socket_connect_timeout=3)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        await client.aclose()
    return None


@cache
def _unreachable() -> str | None:
    return ask(_probe)


def require_redis() -> None:
    require(_unreachable(), "Redis", SKIP_REASON)


@asynccontextmanager
async def redis_keys() -> AsyncIterator[str]:
    """A key prefix no other test uses; every key under it is deleted on exit."""
    require_redis()
    from redis.asyncio import Redis

    prefix = f"t{uuid.uuid4().hex[:12]}"
    try:
        yield prefix
    finally:
        client = Redis.from_url(SERVER)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()
