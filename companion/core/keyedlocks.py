"""One ``asyncio.Lock`` per key, kept only while someone holds or waits for it: the engine's per-scope write
exclusion in one process and the Telegram host's per-user update order stand on it. Imports nothing of the
project."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    """One ``asyncio.Lock`` per key in one process, first come first served. A key's lock goes when
    nobody holds or waits for it, so idle keys cost nothing."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def held(self, key: K) -> bool:
        entry = self._locks.get(key)
        return entry is not None and entry[0].locked()
