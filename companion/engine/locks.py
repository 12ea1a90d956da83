"""The exclusion one scope's writes need (read the rows, plan, write), as a small interface.

``LocalScopeLocks``, one ``asyncio.Lock`` per scope, is the default and enough for one process; a
deployment of several worker processes hands the engine one a database or Redis gives instead. Whatever
the implementation, nothing awaits a model or Telegram while holding one: the engine calls the model
first, then takes the lock and checks its plan against what is stored by then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Hashable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Generic, Protocol, TypeVar

from companion.core.models import Scope

K = TypeVar("K", bound=Hashable)


class ScopeLocks(Protocol):
    def hold(self, scope: Scope) -> AbstractAsyncContextManager[None]:
        """Exclusive for this scope while the context is open; other scopes never wait on it."""
        ...

    def held(self, scope: Scope) -> bool:
        """Whether this process holds the scope's lock now (tests, diagnostics)."""
        ...


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


class LocalScopeLocks(KeyedLocks[Scope]):
    """Implements ``ScopeLocks`` in one process."""
