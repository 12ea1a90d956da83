"""Work over many scopes at once: the daily decay and cleanup (which also prunes the change journal to
``JOURNAL_KEEP``), and moving a group's scopes when the group
changed its chat id (upgraded to a supergroup). Both drop what the engine holds in memory for the scopes
whose rows changed underneath it."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime

from companion.core.models import Scope
from companion.core.setting import LAST_DECAY_AT
from companion.engine.cache import IndexCache
from companion.engine.profile import ProfileService
from companion.engine.retrievers import DenseRetriever
from companion.engine.shortterm import ShortTermBook
from companion.engine.values import DecayReport
from companion.engine.writer import MemoryWriter
from companion.storage.base import JOURNAL_KEEP, MemoryStore


class Upkeep:
    def __init__(
        self, store: MemoryStore, writer: MemoryWriter, cache: IndexCache, profiles: ProfileService,
        short: ShortTermBook, dense: DenseRetriever | None = None,
    ) -> None:
        self._store = store
        self._writer = writer
        self._cache = cache
        self._profiles = profiles
        self._short = short
        self._dense = dense

    async def decay(self, now: datetime, batch: int = 200) -> DecayReport:
        scopes = await self._store.scopes()
        decayed = removed = 0
        for start in range(0, len(scopes), batch):
            part = scopes[start : start + batch]
            d, r = await self._store.decay_and_clean(part, now)
            decayed, removed = decayed + d, removed + r
            await asyncio.sleep(0)
        # Recorded once every scope is done: a run cut short is simply run again (whole days since each
        # row's own anchor, so nothing decays twice).
        await self._store.set_setting(LAST_DECAY_AT, None, now)
        await self._store.prune_changes(now - JOURNAL_KEEP)
        if self._dense is not None:
            await self._dense.prune()  # cleanup tombstoned rows in SQL; their vectors go too
        self._cache.clear()
        for scope in scopes:
            self._profiles.invalidate(scope)
        return DecayReport(len(scopes), decayed, removed)

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        await self._store.begin_move(old_chat_id, new_chat_id, now)

    async def finish_moves(self, now: datetime) -> list[tuple[int, int, list[Scope]]]:
        """Finish every move the marker says a crash cut short: (old id, new id, old scopes moved)."""
        return [(old, new, await self.move_chat(old, new, now)) for old, new in await self._store.unfinished_moves()]

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """The old scopes' locks are held meanwhile, so an extraction already running finishes first and
        its memories move too."""
        olds = sorted((s for s in await self._store.scopes() if s.chat_id == old_chat_id), key=lambda s: s.key)
        async with contextlib.AsyncExitStack() as held:
            for old in olds:
                await held.enter_async_context(self._writer.lock(old))
            moved = await self._store.move_chat(old_chat_id, new_chat_id, now)
        for old in moved:
            for scope in (old, Scope(old.user_id, new_chat_id)):
                self._cache.invalidate(scope)
                self._profiles.invalidate(scope)
                self._short.drop_cached(scope)
        return moved
