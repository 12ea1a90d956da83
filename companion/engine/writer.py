"""Every change to a scope's memories goes through here: new memories (merged with retold ones,
superseding what they replace, within the scope's capacity), rewrites of one memory, and forgetting.

Writes to one scope are serialised by its lock (``ScopeLocks``); other scopes never wait, and no lock is
held across a model call. The recall index follows each write; every derived copy (the profile cache,
the vectors, the chat layer's sessions and spools) is a follower of the change feed
(``companion.engine.following``), told after each write: a forget writes the store and tells the feed
what it took, and never names a copy, so a new copy cannot be missed.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime

from companion.core import tiers
from companion.core.errors import NothingToUndoError
from companion.core.extraction import (
    MergeCandidates,
    MergePlan,
    clean_keywords,
    fingerprint,
    plan_merge,
    same_event,
)
from companion.core.models import Memory, MemoryDraft, Scope, Status, StatusReason, Turn
from companion.core.text import MAX_MEMORY_CHARS, normalize_text
from companion.core.timeutil import utcnow
from companion.engine.cache import IndexCache
from companion.engine.following import ChangeFeed, Forgetting
from companion.engine.locks import LocalScopeLocks, ScopeLocks
from companion.engine.profile import ProfileService
from companion.engine.retrievers import DenseRetriever
from companion.engine.shortterm import ShortTermBook
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import EVERY_STATUS, MemoryStore

log = logging.getLogger(__name__)

# Older memories without a vector that a waited-for write encodes beside its own (one batch of the model).
BACKLOG_PER_WRITE = 8

MAX_TERMS = 64


@dataclass(frozen=True, slots=True)
class Written:
    ids: list[int]  # new rows first, then rows a draft was merged into
    earlier: dict[int, Memory]  # the kept earlier words of each reworded row, by the row's handle


class MemoryWriter:
    def __init__(
        self, store: MemoryStore, keywords: KeywordExtractor, cache: IndexCache, profiles: ProfileService,
        short: ShortTermBook, capacity: int, dense: DenseRetriever | None = None, locks: ScopeLocks | None = None,
        feed: ChangeFeed | None = None,
    ) -> None:
        """``feed``: the derived copies to tell after each write (the engine's; none by default)."""
        self._store = store
        self._keywords = keywords
        self._cache = cache
        self._profiles = profiles
        self._short = short
        self._capacity = capacity
        self._dense = dense
        self.locks = locks or LocalScopeLocks()
        self.feed = feed or ChangeFeed(store)

    def lock(self, scope: Scope) -> AbstractAsyncContextManager[None]:
        return self.locks.hold(scope)

    def prepare(self, draft: MemoryDraft) -> MemoryDraft:
        """Normalised text (at most ``MAX_MEMORY_CHARS``), cleaned keywords (from the text when none were given)
        and index terms."""
        draft.event = normalize_text(draft.event)[:MAX_MEMORY_CHARS]
        draft.keywords = clean_keywords(draft.keywords) or self._keywords.keywords(draft.event, limit=8)
        draft.terms = self._keywords.keywords(draft.event, limit=MAX_TERMS)
        return draft

    async def remember(
        self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime, *, embed: bool = True
    ) -> list[int]:
        return (await self.write_drafts(scope, drafts, now, embed=embed)).ids

    async def write_drafts(
        self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime, *, embed: bool = True
    ) -> Written:
        """``remember``, saying also which rows a retelling reworded and where their earlier words are kept."""
        prepared = [self.prepare(d) for d in drafts]
        async with self.lock(scope):
            plan, active = await self._plan(scope, prepared, now)
            ids = await self._store.apply_changes(scope, now, inserts=plan.inserts, updates=plan.updates,
                                                  sources=_sources(prepared))
            evicted, earlier = await self._settle(scope, plan, ids, active, now)
        self._profiles.invalidate(scope)
        if evicted:
            log.info("capacity: %d memories of %s evicted", evicted, scope.key)
        await self._told(scope)
        touched = [*ids, *(m.id for m in plan.updates)]
        if embed:
            await self.embed(scope, now, written=len(touched))
        return Written(touched, earlier)

    async def absorb(
        self, scope: Scope, turns: Sequence[Turn], drafts: Sequence[MemoryDraft], now: datetime,
        changed: Collection[int] = (), seen: Iterable[Memory] = (),
    ) -> MergePlan:
        """Store what an extraction learned from queued turns and consume those turns, in one transaction.
        The caller holds the scope's lock, taken after the model answered: the plan is made against the
        rows as they are now, so a fact retold meanwhile merges and a memory forgotten meanwhile stays
        forgotten. ``changed``: memories written while the model read the turns (the user edited or saved
        them since): a retelling merges into them but keeps their words, which are newer than the turns;
        one that retells them as they were (``seen``: as the model was shown them) is not learned again."""
        forgotten = await self._forgotten_prints(scope) if drafts else set()
        overtaken = [m for m in seen if m.id in changed]
        now_words = {m.id: m for m in await self._store.fetch_by_ids(scope, [m.id for m in overtaken])} \
            if overtaken and drafts else {}

        def stale(d: MemoryDraft) -> bool:
            """A retelling of a memory as the model was shown it, which has other words now (an edit): learning
            it would bring the old words back as a memory of their own. One that still matches the memory's
            words now merges into it below, keeping those words."""
            return any(same_event(m.event, m.keywords, d.event, d.keywords)
                       and not (m.id in now_words and now_words[m.id].is_active
                                and same_event(now_words[m.id].event, now_words[m.id].keywords, d.event, d.keywords))
                       for m in overtaken)

        prepared = [self.prepare(d) for d in drafts if fingerprint(d.event) not in forgotten and not stale(d)]
        await self._cache.refresh(scope)  # another process may have written since the index was current
        plan, active = await self._plan(scope, prepared, now)
        plan.dropped = len(drafts) - len(prepared)
        # Words written after these turns were said (a summary, a save, an edit) are newer than what the turns
        # tell: a retelling merges into them (its importance and mentions count) and keeps them, in whatever
        # order the writes were scheduled.
        said = max(t.at for t in turns)
        plan.updates = [_keep_words(m, plan.before[m.id])
                        if m.id in plan.before and (m.id in changed or plan.before[m.id].updated_at > said) else m
                        for m in plan.updates]
        up_to = max(t.id or 0 for t in turns)
        ids = await self._store.consume_turns(scope, up_to, now, plan.inserts, plan.updates,
                                              sources=[t.key for t in turns if t.key])
        evicted, _ = await self._settle(scope, plan, ids, active, now)
        self._profiles.invalidate(scope)
        if evicted:
            log.info("capacity: %d memories of %s evicted", evicted, scope.key)
        await self._told(scope)
        return plan

    async def embed(self, scope: Scope, now: datetime, *, written: int | None = None) -> None:
        """Encode what the write left without a vector: after the lock, so an embedding call never holds up
        the scope's other writes. ``written``: a write someone waits for (a save, an edit, an undo) encodes
        what it wrote and at most ``BACKLOG_PER_WRITE`` older memories; a background write (extraction),
        the policy's whole batch. A database from before semantic recall is ``reindex``'s work: a first save
        used to wait for 100-256 old memories to be encoded (1.4 s p50 at 100, BENCHMARKS.md)."""
        if self._dense is not None:
            await self._dense.sync(scope, now, limit=None if written is None else written + BACKLOG_PER_WRITE)

    async def _plan(self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime) -> tuple[MergePlan, int]:
        """Dedup each draft against only the rows that could match it (same event text or two shared
        keywords): a batch checked against the union of every draft's candidates cost drafts x union
        comparisons, seconds for a big batch of a big user. From the recall index when the scope's is
        loaded (it is chatting); otherwise from its rows, without building an index nobody may read (a
        bulk load, an extraction or an operator's write for a user who is not chatting). Also returns how
        many active memories the scope had."""
        index = self._cache.cached(scope)
        if index is not None:
            near = plan_merge((), drafts, now, near=lambda draft: index.candidates(draft.event, draft.keywords))
            return near, len(index.memories)
        stored = MergeCandidates(await self._store.fetch_memories(scope))
        return plan_merge((), drafts, now, near=stored.near), len(stored)

    async def _settle(
        self, scope: Scope, plan: MergePlan, ids: Sequence[int], active: int, now: datetime
    ) -> tuple[int, dict[int, Memory]]:
        await self._supersede(scope, plan.inserts, ids, now)
        earlier = await self._keep_wording(scope, plan, now)
        await self._cache.add(scope, [*ids, *(m.id for m in plan.updates)])
        return await self._enforce_capacity(scope, active + len(plan.inserts), now), earlier

    async def _supersede(self, scope: Scope, drafts: Sequence[MemoryDraft], ids: Sequence[int], now: datetime) -> None:
        """New information that replaces old: the old memory stays, linked to the new one, never recalled."""
        pairs = {d.supersedes: new for d, new in zip(drafts, ids, strict=True) if d.supersedes is not None}
        if not pairs:
            return
        old = await self._store.fetch_by_ids(scope, list(pairs))
        updates = [replace(m, status=Status.SUPERSEDED, superseded_by=pairs[m.id], status_reason=StatusReason.REPLACED,
                           updated_at=now) for m in old if m.is_active]
        if updates:
            await self._store.apply_changes(scope, now, updates=updates)
            for m in updates:
                self._cache.remove(scope, m.id)

    async def _keep_wording(self, scope: Scope, plan: MergePlan, now: datetime) -> dict[int, Memory]:
        """A retelling in other words rewrites its row; the words it replaced stay as a superseded copy
        linked to the row, so ``/why`` shows them and an undo can put them back. Returns the stored copies
        by the handle of the row they belong to."""
        copies = [replace(before, status=Status.SUPERSEDED, superseded_by=after.id, status_reason=StatusReason.REWORDED,
                          updated_at=now) for before, after in plan.reworded()]
        if not copies:
            return {}
        handles = await self._store.import_rows(scope, copies, now, keep_ids=False)
        return {copy.superseded_by or 0: replace(copy, id=h) for copy, h in zip(copies, handles, strict=True)}

    async def undo_rewording(self, scope: Scope, handle: int, now: datetime, copy: int | None = None) -> Memory:
        """Put back the words a retelling replaced (the newest kept copy of the row ``handle``, which must be
        ``copy`` when given: an older receipt's undo does not undo a later change); the copy goes. Raises
        NothingToUndoError when there is no such copy (or the row is no longer active)."""
        async with self.lock(scope):
            everything = await self._store.fetch_memories(scope, {Status.ACTIVE, Status.SUPERSEDED})
            live = next((m for m in everything if m.id == handle and m.is_active), None)
            copies = [m for m in everything if m.superseded_by == handle and m.status_reason == StatusReason.REWORDED]
            old = max(copies, key=lambda m: m.id) if copies else None
            if live is None or old is None or copy not in (None, old.id):
                raise NothingToUndoError(f"memory {handle} has no such earlier wording")
            restored = replace(
                live, event=old.event, keywords=old.keywords, terms=old.terms, importance=old.importance,
                validity=old.validity, type=old.type, tier=old.tier, expires_at=old.expires_at,
                review_at=old.review_at, updated_at=now,
            )
            await self._store.apply_changes(scope, now, updates=[restored], forget=[old.id], reason=StatusReason.UNDONE)
            self._cache.remove(scope, handle)
            await self._cache.add(scope, [handle])
        self._profiles.invalidate(scope)
        await self._told(scope)
        await self.embed(scope, now, written=1)
        return restored

    async def _enforce_capacity(self, scope: Scope, at_most: int, now: datetime) -> int:
        # ``at_most``: active memories before the write plus the new rows. Under capacity, no read of
        # every row per write.
        if at_most <= self._capacity:
            return 0
        victims = tiers.to_evict(await self._store.fetch_memories(scope), self._capacity, now)
        if victims:
            await self._store.apply_changes(scope, now, forget=[m.id for m in victims], reason=StatusReason.EVICTED)
            for m in victims:
                self._cache.remove(scope, m.id)
        return len(victims)

    async def _forgotten_prints(self, scope: Scope) -> set[str]:
        """Fingerprints of what the user asked to forget: a draft with those words is not learned again.
        Read under the lock at each extraction, never cached: another process may have forgotten since."""
        stones = await self._store.fetch_memories(scope, {Status.FORGOTTEN})
        return {m.fingerprint for m in stones if m.status_reason == StatusReason.USER}

    async def write(self, scope: Scope, memory: Memory) -> Memory:
        """Store a changed memory as it is given (the caller read it through the owner check)."""
        async with self.lock(scope):
            await self._store.apply_changes(scope, memory.updated_at, updates=[memory])
            self._cache.remove(scope, memory.id)
            if memory.is_active:
                await self._cache.add(scope, [memory.id])
        self._profiles.invalidate(scope)
        await self._told(scope)
        await self.embed(scope, memory.updated_at, written=1)  # an edit changes what the vector must say
        return memory

    async def forget(self, scope: Scope, ids: Iterable[int] | None, reason: str) -> Forgetting:
        """Forget and return what was forgotten (as it was) and the keys of the turns it came from. The text
        goes at once, in one store transaction: table (a content-free tombstone stays), profile, vectors, the
        short-term items and queued turns it came from or that tell it, and the journal entries; with
        ``ids=None`` every queued turn and short-term item of the scope too. Then the change feed tells every
        derived copy (``following``), with what was forgotten: nothing here names a copy."""
        wanted_ids = None if ids is None else set(ids)
        async with self.lock(scope):
            stored = await self._store.fetch_memories(scope, EVERY_STATUS - {Status.FORGOTTEN})
            # A memory's earlier wordings go with it.
            wanted = [m for m in stored if wanted_ids is None or m.id in wanted_ids
                      or (m.status_reason == StatusReason.REWORDED and m.superseded_by in wanted_ids)]
            keys: set[str] = set()
            if wanted or wanted_ids is None:
                short, queued = await self._short.telling(scope, wanted) if wanted_ids is not None else ([], [])
                keys = await self._store.forget_everywhere(
                    scope, None if wanted_ids is None else [m.id for m in wanted], utcnow(), reason,
                    queued=queued, short=short)
                self._short.drop_cached(scope)
        done = Forgetting(wanted, frozenset(keys), everything=wanted_ids is None)
        if wanted or done.everything:
            await self.feed.forgot(scope, done)
        return done

    async def _told(self, scope: Scope) -> None:
        """After a write: the followers take its journal entries now, not the next turn (which then reads
        nothing more than its own context)."""
        await self.feed.catch_up(scope)


def _keep_words(merged: Memory, stored: Memory) -> Memory:
    return replace(merged, event=stored.event, terms=stored.terms, keywords=stored.keywords, type=stored.type)


def _sources(drafts: Sequence[MemoryDraft]) -> list[str]:
    return list(dict.fromkeys(key for draft in drafts for key in draft.source_turns))
