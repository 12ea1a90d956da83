"""The SQLite writer's lock: one holder at a time, and a turn's writes go before background work.

A reply waits for its turn's write (the short-term item, the queued turn) and its usage row, each a moment's
hold: queued and let go (``Connection.write_whole``). Background work (an extraction's consolidation, a
profile rebuild) holds the lock across several trips to the database thread, each through a busy event
loop. With one first-come queue a turn's write waited behind every background transaction queued before it
(~0.3 s a reply at 300 messages/s); here it waits at most for the one being held. Background work still
runs whenever no turn write is waiting, which under load is most of the time: those hold for microseconds.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType


class TurnFirstLock:
    """``async with lock``: the plain queue; ``async with lock.first()``: ahead of it. Granted in order within
    each queue, handed directly from holder to waiter."""

    def __init__(self) -> None:
        self._held = False
        self._first: deque[asyncio.Future[None]] = deque()
        self._rest: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    async def __aenter__(self) -> None:
        await self._acquire(self._rest)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._release()

    @asynccontextmanager
    async def first(self) -> AsyncIterator[None]:
        await self._acquire(self._first)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, queue: deque[asyncio.Future[None]]) -> None:
        if not self._held and not self._first and not self._rest:
            self._held = True
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(granted)
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release()  # handed over just as the waiter was cancelled: pass it on
            elif granted in queue:
                queue.remove(granted)
            raise

    def _release(self) -> None:
        for queue in (self._first, self._rest):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)  # the lock stays held: it now belongs to that waiter
                    return
        self._held = False
