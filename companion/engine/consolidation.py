"""Consolidation: the queued turns become memories (and today's events) in one extraction, skipping turns
a forgotten memory came from; and a finished conversation becomes a short-term summary memory unless
something it sums up was forgotten meanwhile. Raises LLMError and keeps the turns queued when the model
cannot answer.

The model is asked without the scope's lock (extractions of one scope take turns among themselves,
which nothing else waits on); then, under it, the extraction is stored only if every turn
it read is still queued (a forget, a chat's move or another worker may have taken some meanwhile: then it
is asked again about what is queued now), and merged against the rows as they are by then: a memory
the user edited or saved meanwhile keeps its newer words. A profile rebuild that is due rides on the same call
(``ProfileService.ask_with_extraction``) and is kept, under the lock, only when the extraction was stored whole."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Protocol

from companion.core.keyedlocks import KeyedLocks
from companion.core.models import Memory, Recalled, Scope, Turn
from companion.core.setting import LAST_EXTRACTION
from companion.engine.learner import MAX_RELATED, Learner, related
from companion.engine.profile import ProfileService
from companion.engine.shortterm import ShortTermBook
from companion.engine.values import Consolidation
from companion.engine.writer import MemoryWriter
from companion.storage.base import MemoryStore

log = logging.getLogger(__name__)

ATTEMPTS = 3  # extractions overtaken by a change to their turns before this one gives up until next time
MAX_CHANGED = 1000  # journal entries read for the memories written while the model read the turns


class RelatedRecall(Protocol):
    async def __call__(self, scope: Scope, text: str, now: datetime, *, limit: int, min_importance: float,
                       cooldown: None) -> list[Recalled]: ...


class Consolidator:
    def __init__(
        self, store: MemoryStore, writer: MemoryWriter, learner: Learner, short: ShortTermBook,
        recall: RelatedRecall, get: Callable[[Scope, int], Awaitable[Memory]], clock: Callable[[], datetime],
        batch: int, profiles: ProfileService,
    ) -> None:
        self._profiles = profiles
        self._store = store
        self._writer = writer
        self._learner = learner
        self._short = short
        self._recall = recall
        self._get = get
        self._clock = clock
        self._batch = batch
        self._extracting = KeyedLocks[Scope]()

    async def consolidate(self, scope: Scope, now: datetime) -> Consolidation:
        # One extraction of a scope at a time in this process: a second would ask the model about the same
        # turns only to find them taken. It waits on this, never on the scope's write lock.
        async with self._extracting.hold(scope):
            for _ in range(ATTEMPTS):
                done = await self._attempt(scope, now)
                if done is not None:
                    return done
        log.info("extraction for %s overtaken by changes to its turns; they stay queued", scope.key)
        return Consolidation(0, 0, 0)

    async def _attempt(self, scope: Scope, now: datetime) -> Consolidation | None:
        """One extraction, or None when its turns changed while the model read them."""
        # Read first: whatever is written from here on (a summary, a save while the related memories are
        # looked up or the model reads) counts as newer than these turns and keeps its words in the merge.
        seen = await self._store.change_counter(scope)
        while True:  # a batch of nothing but forgotten turns must not hide the turns queued after it
            queued = await self._store.pending_turns(scope, self._batch)
            turns = await self._unforgotten(scope, queued)
            if turns or not queued:
                break
        if not turns:
            return Consolidation(0, 0, 0)
        known = await related(self._store, scope, await self._recall(
            scope, " ".join(t.user for t in turns), self._clock(), limit=MAX_RELATED, min_importance=0,
            cooldown=None))
        ask = await self._profiles.ask_with_extraction(scope, now)
        drafts, today_events, profile = await self._learner.extract(turns, known, now,
                                                                    profile=ask.prompt if ask else "")
        async with self._writer.lock(scope):
            still = {t.id for t in await self._store.pending_turns(scope, self._batch)}
            if any(t.id not in still for t in turns):
                return None
            since = await self._store.changes_since(scope, seen, MAX_CHANGED)
            batch = [t.key for t in turns if t.key]
            for event in today_events:
                await self._short.add_event(scope, event, turns[-1].at, batch)
            plan = await self._writer.absorb(scope, turns, drafts, now,
                                             changed={c.handle for c in since if c.handle is not None},
                                             seen=known.values())
            if ask is not None:
                await self._profiles.adopt(scope, ask, profile, now, rewritten={m.id for m in plan.updates},
                                           learned=bool(plan.inserts or plan.updates),
                                           whole=not since and not plan.dropped)
        await self._store.set_setting(LAST_EXTRACTION, scope, now)
        await self._writer.embed(scope, now)
        log.info("extraction for %s: %d turns, %d new, %d updated",
                 scope.key, len(turns), len(plan.inserts), len(plan.updates))
        return Consolidation(len(turns), len(plan.inserts), len(plan.updates))

    async def _unforgotten(self, scope: Scope, turns: list[Turn]) -> list[Turn]:
        """The queued turns but any a forgotten memory came from (queued after the forget: a tool's save
        and forget in one reply), which leave the queue unread."""
        told = await self._store.forgotten_turns(scope, [t.key for t in turns if t.key])
        if not told:
            return turns
        await self._store.drop_turns(scope, [t.id for t in turns if t.key in told and t.id is not None])
        return [t for t in turns if t.key not in told]

    async def summarise(self, scope: Scope, turns: Sequence[Turn], now: datetime) -> Memory | None:
        draft = await self._learner.summary(turns, now)
        if draft is None:
            return None
        draft.source_turns = tuple(t.key for t in turns if t.key)
        if await self._store.forgotten_turns(scope, draft.source_turns):
            return None  # something it sums up was forgotten while the model wrote it
        [handle, *_] = await self._writer.remember(scope, [draft], now)
        return await self._get(scope, handle)
