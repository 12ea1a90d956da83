"""The PostgreSQL test server: a fresh schema per test (``pg_schema``), dropped after, so tests never see
each other's rows and need no database of their own. ``TEST_DATABASE_URL`` names the server (default: the
local one every session and CI run has). Without a server the tests skip with one reason; with
``CI=true`` they fail instead, so CI can never pass without running them."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from bench.server import server_schema
from tests.servers import ask, require

SERVER = os.environ.get("TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
SKIP_REASON = "PostgreSQL tests: no server at TEST_DATABASE_URL (default 127.0.0.1:5432/test); CI=true makes this fail"


async def _probe() -> str | None:
    try:
        import asyncpg
    except ImportError as exc:
        return f"asyncpg is not installed ({exc})"
    try:
        conn = await asyncpg.connect(SERVER, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError) as exc:
        return f"{type(exc).__name__}: {exc}"
    await conn.close()
    return None


@cache
def _unreachable() -> str | None:
    return ask(_probe)


def require_server() -> None:
    """Skip (or in CI fail) the calling test when the server is unreachable."""
    require(_unreachable(), "PostgreSQL", SKIP_REASON)


@asynccontextmanager
async def pg_schema() -> AsyncIterator[str]:
    """A URL whose connections work in a new, empty schema (``search_path``), dropped on exit."""
    require_server()
    async with server_schema(SERVER, "t") as url:
        yield url


def named(url: str, application: str) -> str:
    """``url`` (from ``pg_schema``) with an ``application_name`` of its own, so ``ending_backends`` ends only
    the connections opened through it."""
    return f"{url}{'&' if '?' in url else '?'}application_name={application}"


@asynccontextmanager
async def ending_backends(application: str, every: tuple[float, float]) -> AsyncIterator[list[int]]:
    """While the block runs, end every backend named ``application`` (``pg_terminate_backend``, what a server
    restart does to each connection) again and again, at random intervals within ``every`` seconds; yields
    a one-item list holding how many were ended so far."""
    import asyncio
    import random

    import asyncpg

    ended = [0]
    admin = await asyncpg.connect(SERVER)
    stop = asyncio.Event()

    async def keep_ending() -> None:
        while not stop.is_set():
            await asyncio.sleep(random.uniform(*every))
            ended[0] += int(await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                application))

    task = asyncio.create_task(keep_ending())
    try:
        yield ended
    finally:
        stop.set()
        await task
        await admin.close()
