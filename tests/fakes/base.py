"""What every fake server shares: an aiohttp app on 127.0.0.1, start/stop/``async with``, a log of every
HTTP request it saw, and waiting for a condition without polling."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A wait is a bound on how long a stuck bot is waited for, never a speed check (benchmarks do that): it ends as
# soon as what it waits for happens. Under pytest-xdist, several bot processes share the cores, so a start-up or
# a reply can take a few times as long as alone; the bounds stretch with them rather than fail a working bot.
WAIT_SCALE = float(os.environ.get("TEST_WAIT_SCALE") or (3 if os.environ.get("PYTEST_XDIST_WORKER") else 1))


class FakeServer:
    """Subclasses add their routes in ``_routes``; ``base_url`` is set once ``start`` has bound a port."""

    def __init__(self) -> None:
        self.base_url = ""
        # (HTTP method, path) of every request, including ones the fake answers with an error.
        self.http_log: list[tuple[str, str]] = []
        # Replaced on every state change; waiters grab the current one before checking, so none is missed.
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        app = web.Application(middlewares=[self._log_request])
        self._routes(app)
        # handler_cancellation: a request abandoned by a stopped client must not block stop().
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @web.middleware
    async def _log_request(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.http_log.append((request.method, request.path))
        self._notify()
        return await handler(request)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, ready: Callable[[], bool], within: float, why: Callable[[], str]) -> None:
        """Return once ``ready()`` holds; raise AssertionError with ``why()`` after ``within`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within * WAIT_SCALE
        while True:
            changed = self._changed
            if ready():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(why())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), remaining)
