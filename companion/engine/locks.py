"""The exclusion one scope's writes need (read the rows, plan, write), as a small interface.

``LocalScopeLocks``, one ``asyncio.Lock`` per scope, is the default and enough for one process; a
deployment of several worker processes hands the engine one a database or Redis gives instead. Whatever
the implementation, nothing awaits a model or Telegram while holding one: the engine calls the model
first, then takes the lock and checks its plan against what is stored by then.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from companion.core.keyedlocks import KeyedLocks
from companion.core.models import Scope


class ScopeLocks(Protocol):
    def hold(self, scope: Scope) -> AbstractAsyncContextManager[None]:
        """Exclusive for this scope while the context is open; other scopes never wait on it."""
        ...

    def held(self, scope: Scope) -> bool:
        """Whether this process holds the scope's lock now (tests, diagnostics)."""
        ...


class LocalScopeLocks(KeyedLocks[Scope]):
    """Implements ``ScopeLocks`` in one process."""
