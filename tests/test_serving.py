"""The bot's HTTP server cuts off clients too slow with their headers or their body (a slowloris would
otherwise hold sockets for an hour each), while a prompt request is answered as before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from handlers.serving import guarded_runner

LIMIT = 0.6


async def echo(request: web.Request) -> web.Response:
    return web.Response(text=f"got {len(await request.read())}")


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_post("/hook", echo)
    runner = guarded_runner(app, header_seconds=LIMIT, body_seconds=LIMIT)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert runner.addresses
    yield int(runner.addresses[0][1])
    await runner.cleanup()


async def exchange(port: int, sent: bytes) -> tuple[bytes, float]:
    """What the server sent back to ``sent`` before it closed the connection, and how long until it did."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(sent)
    await writer.drain()
    started = time.monotonic()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data, time.monotonic() - started


async def test_slow_headers_are_cut_off(port: int) -> None:
    data, waited = await exchange(port, b"POST /hook HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    assert data == b"" and waited < 5


async def test_a_slow_body_is_refused_with_408(port: int) -> None:
    data, waited = await exchange(port, b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    assert data.startswith(b"HTTP/1.1 408") and waited < 5


async def test_a_prompt_request_is_answered(port: int) -> None:
    closing = b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
    data, _ = await exchange(port, closing)
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"got 3")


async def test_an_idle_kept_alive_connection_is_closed(port: int) -> None:
    data, waited = await exchange(port, b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na")
    assert data.startswith(b"HTTP/1.1 200") and waited < 5
