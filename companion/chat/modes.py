"""Companion mode per scope: kept in the store (so every worker process sees it, and it survives a
restart) and cached here for the handlers' synchronous check.

The cache is refreshed from the store by every turn's one read (``observe``): a /start or /stop another
process handled is seen at that scope's next turn. It is not refreshed while this process is switching
the scope, nor when a switch happened during the read: /stop flips the cache before it awaits anything,
so a message handled meanwhile already sees "off", and the store's older "on" must not undo that.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from companion.core.models import Scope
from memory import MemoryEngine


class CompanionModes:
    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine
        self._on: set[Scope] = set()
        self._switching: dict[Scope, int] = {}  # switches in progress, per scope
        self._switches = 0  # every switch of any scope: a read that saw one begin is not trusted

    async def load(self) -> None:
        self._on = await self._engine.active_scopes()

    async def reload(self, which: Callable[[Scope], bool]) -> None:
        """Read again from the store the mode of every scope ``which`` picks (their chats were handled by
        another worker process until now; this one takes them over). A scope being switched here keeps
        what this process set."""
        stored = await self._engine.active_scopes()
        for scope in [*self._on, *stored]:
            if which(scope) and scope not in self._switching and (scope in stored) != (scope in self._on):
                self.set(scope, scope in stored)

    def is_on(self, scope: Scope) -> bool:
        return scope in self._on

    def set(self, scope: Scope, on: bool) -> None:
        """This process switched it (inside ``switching``, around the store's write)."""
        self._switches += 1
        if on:
            self._on.add(scope)
        else:
            self._on.discard(scope)

    @asynccontextmanager
    async def switching(self, scope: Scope) -> AsyncIterator[None]:
        self._switching[scope] = self._switching.get(scope, 0) + 1
        self._switches += 1
        try:
            yield
        finally:
            left = self._switching.pop(scope) - 1
            if left:
                self._switching[scope] = left

    def mark(self) -> int:
        """Taken before a read of the store, handed back to ``observe`` with what it read."""
        return self._switches

    async def check(self, scope: Scope) -> bool:
        """``is_on``, asking the store when the cache says off: another process may have switched it on
        (a person outside companion mode is asked, at most once a message; one in it, never)."""
        if scope in self._on:
            return True
        mark = self.mark()
        self.observe(scope, await self._engine.companion_mode(scope), mark)
        return scope in self._on

    def observe(self, scope: Scope, on: bool, mark: int) -> bool:
        """Take what a read of the store said; True when that switched the scope off here (another process
        stopped companion mode)."""
        if scope in self._switching or mark != self._switches or on == (scope in self._on):
            return False
        self.set(scope, on)
        return not on

    def moved(self, old: Scope, new: Scope) -> None:
        if old in self._on:
            self.set(old, False)
            self.set(new, True)
