"""The user steers their memories: reads checked against the owner, saves of a judged memory, edits,
tier moves, archive and restore, pins, answers to reviews and their undo, search_memories, provenance (/why) and
counts (/stats).
Every change goes through the writer, so caches, profile and vectors follow."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Protocol

from companion.core import dates, rules, tiers
from companion.core.errors import MemoryNotFoundError, NothingToUndoError, NotYourMemoryError
from companion.core.models import (
    Memory,
    MemoryDraft,
    MemoryType,
    Origin,
    Recalled,
    Scope,
    Status,
    StatusReason,
    Tier,
)
from companion.core.text import normalize_text
from companion.engine.retrievers import DenseRetriever
from companion.engine.values import MemoryStats, Provenance, Saved
from companion.engine.writer import MemoryWriter
from companion.recall.search_filters import MemoryFilter, matches_words
from companion.storage.base import ACTIVE_ONLY, EVERY_STATUS, MemoryStore

REVIEW_UNDO_WINDOW = timedelta(seconds=60)  # how long an answer to a review can be taken back


class SearchRecall(Protocol):
    async def __call__(self, scope: Scope, text: str, now: datetime, *, limit: int,
                       min_importance: float) -> list[Recalled]: ...


class Curator:
    def __init__(self, store: MemoryStore, writer: MemoryWriter, recall: SearchRecall,
                 dense: DenseRetriever | None = None, tz: tzinfo = UTC) -> None:
        self._tz = tz
        self._store = store
        self._writer = writer
        self._recall = recall
        self._dense = dense

    async def get(self, scope: Scope, handle: int) -> Memory:
        """One memory by handle, checked against its owner: another scope's handle is refused, never read."""
        owner = await self._store.owner_of(handle)
        if owner is None:
            raise MemoryNotFoundError(f"no memory {handle}")
        if owner != scope:
            raise NotYourMemoryError(f"memory {handle} belongs to another scope")
        found = await self._store.fetch_by_ids(scope, [handle])
        if not found:
            raise MemoryNotFoundError(f"no memory {handle}")
        return found[0]

    async def save(self, scope: Scope, draft: MemoryDraft, now: datetime) -> Saved:
        """Store one judged memory; the same fact retold rises to the draft's tier if that is higher."""
        written = await self._writer.write_drafts(scope, [draft], now)
        memory = await self.get(scope, written.ids[0])
        if draft.tier is not None and tiers.ORDER.index(memory.tier) < tiers.ORDER.index(draft.tier):
            memory = await self._writer.write(scope, tiers.move_to_tier(memory, draft.tier, now))
        return Saved(memory, written.earlier.get(memory.id))

    async def edit(
        self, scope: Scope, handle: int, text: str | None, now: datetime, *, importance: float | None = None
    ) -> Memory:
        """New wording for one memory (keywords and index terms follow) and/or a new importance."""
        memory = await self.get(scope, handle)
        if importance is not None:
            memory = replace(memory, importance=min(max(float(importance), 0.0), 100.0), updated_at=now)
        if text is None:
            return await self._writer.write(scope, replace(memory, updated_at=now))
        # New words name their own day ("改成下周四"): a relative one becomes the date; none keeps the old one.
        dated = dates.resolve_for(memory.type, text, now.astimezone(self._tz).date())
        draft = self._writer.prepare(MemoryDraft(event=dated.text, keywords=[], importance=memory.importance))
        happens = dated.when or memory.happens
        validity, expires, anchor = rules.dated_lifetime(memory.validity, happens, memory.created_at, now)
        if happens == memory.happens:
            validity, expires, anchor = memory.validity, memory.expires_at, memory.last_decay_at
        return await self._writer.write(scope, replace(
            memory, event=draft.event, keywords=draft.keywords, terms=draft.terms, updated_at=now, happens=happens,
            validity=validity, expires_at=expires, last_decay_at=max(anchor, memory.last_decay_at)))

    async def undo_rewording(self, scope: Scope, handle: int, now: datetime, copy: int | None = None) -> Memory:
        await self.get(scope, handle)  # owner check before anything changes
        return await self._writer.undo_rewording(scope, handle, now, copy)

    async def move(self, scope: Scope, handle: int, tier: Tier, now: datetime) -> Memory:
        return await self._writer.write(scope, tiers.move_to_tier(await self.get(scope, handle), tier, now))

    async def promote(self, scope: Scope, handle: int, now: datetime) -> Memory:
        memory = await self.get(scope, handle)
        moved = tiers.move_to_tier(memory, tiers.next_tier(memory.tier), now)
        # The weekly summary counts it.
        return await self._writer.write(scope, replace(moved, status_reason=StatusReason.PROMOTED))

    async def keep(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Keep as it is and ask again after one more period of its tier."""
        return await self._writer.write(scope, tiers.keep_for_another_period(await self.get(scope, handle), now))

    async def archive(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Put away: never recalled, kept in backups, restorable from /memories."""
        memory = await self.get(scope, handle)
        archived = replace(memory, status=Status.ARCHIVED, status_reason=StatusReason.USER, updated_at=now)
        return await self._writer.write(scope, archived)

    async def restore(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Bring an archived memory back (its review restarts in its tier)."""
        memory = await self.get(scope, handle)
        if memory.status is not Status.ARCHIVED:
            return memory
        back = replace(memory, status=Status.ACTIVE, status_reason=StatusReason.NONE)
        return await self._writer.write(scope, tiers.keep_for_another_period(back, now))

    async def set_review(self, scope: Scope, handle: int, when: datetime) -> Memory:
        """Put a review time back (undoing a "keep")."""
        return await self._writer.write(scope, replace(await self.get(scope, handle), review_at=when))

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        """Record that these memories were shown (a list): their last access time moves."""
        await self._store.touch(scope, ids, now)

    async def pin(self, scope: Scope, handle: int, pinned: bool, now: datetime) -> Memory:
        return await self._writer.write(scope, replace(await self.get(scope, handle), pinned=pinned, updated_at=now))

    async def search(
        self, scope: Scope, query: str, now: datetime, *, statuses: Collection[Status] = ACTIVE_ONLY,
        tiers_: Collection[Tier] | None = None, types: Collection[MemoryType] | None = None,
        since: datetime | None = None, until: datetime | None = None, origins: Collection[Origin] | None = None,
        limit: int = 20, use: bool = False,
    ) -> list[Memory]:
        """search_memories: memories matching a query (every word, or the text itself), newest first, then
        those close in meaning (when semantic recall is on); an empty query lists them all. Filters: status,
        tier, type, origin, learned in [since, until). ``use``: the search brings them into a conversation
        (the model's tool), which counts as an access; a user looking (``/memories``, ``/why``) does not."""
        words = [w for w in normalize_text(query).lower().split() if w]
        filters = MemoryFilter.of(types=types or (), tiers=tiers_ or (), origins=origins or (), since=since,
                                  until=until)
        found = [m for m in await self._store.fetch_memories(scope, statuses)
                 if filters.admits(m) and matches_words(m, words)]
        found.sort(key=lambda m: (m.created_at, m.id), reverse=True)
        if words and self._dense is not None and len(found) < limit:
            found += await self._dense.similar(scope, query, filters, statuses, limit, exclude={m.id for m in found})
        if words and not found:
            found = [r.memory for r in await self._recall(scope, query, now, limit=limit, min_importance=0)
                     if r.memory.status in statuses and filters.admits(r.memory)]
            found.sort(key=lambda m: (m.created_at, m.id), reverse=True)
        found = found[:limit]
        if use:
            await self._store.touch(scope, [m.id for m in found if m.is_active], now)
        return found

    async def why(self, scope: Scope, handle: int) -> Provenance:
        """Where a memory came from and how it changed: its source, and the memories it replaced."""
        memory = await self.get(scope, handle)
        everything = await self._store.fetch_memories(scope, EVERY_STATUS)
        if memory.status_reason == StatusReason.REWORDED:  # a memory's earlier words: its story is the memory's
            memory = next((m for m in everything if m.id == memory.superseded_by), memory)
            handle = memory.id
        replaced = [m for m in everything if m.superseded_by == handle]
        newer = next((m for m in everything if m.id == memory.superseded_by), None)
        return Provenance(memory, replaced, newer)

    async def due_reviews(self, scope: Scope, now: datetime) -> list[tuple[Memory, tiers.Suggestion]]:
        """Memories at their review time, each with a suggestion and its reason."""
        due = [m for m in await self._store.fetch_memories(scope) if tiers.is_due(m, now)]
        due.sort(key=lambda m: (m.review_at or now, m.id))
        return [(m, tiers.suggest(m, now)) for m in due]

    async def review(self, scope: Scope, handle: int, action: tiers.Action, now: datetime) -> Memory:
        """Apply the user's answer to a review."""
        if action is tiers.Action.PROMOTE:
            return await self.promote(scope, handle, now)
        if action is tiers.Action.ARCHIVE:
            return await self.archive(scope, handle, now)
        if action is tiers.Action.FORGET:
            memory = await self.get(scope, handle)  # owner check before anything changes
            gone = (await self._writer.forget(scope, [handle], StatusReason.USER)).memories
            return gone[0] if gone else memory
        return await self.keep(scope, handle, now)

    async def undo_review(
        self, scope: Scope, handle: int, action: tiers.Action, now: datetime, *, done_at: datetime,
        tier: Tier | None = None, review_at: datetime | None = None,
    ) -> Memory:
        """Take back an answer to a review given at ``done_at``, within ``REVIEW_UNDO_WINDOW``: an archived
        memory comes back, a promoted one returns to ``tier`` (the tier it had), and the review time returns
        to ``review_at`` when given. Forgetting is final. Raises NothingToUndoError past the window, for a
        forget, or for a promote without the tier it left."""
        if now - done_at > REVIEW_UNDO_WINDOW:
            raise NothingToUndoError("the review's undo window has passed")
        if action is tiers.Action.FORGET or (action is tiers.Action.PROMOTE and tier is None):
            raise NothingToUndoError(f"a review's {action.value} cannot be undone here")
        memory = await self.get(scope, handle)  # owner check before anything changes
        if action is tiers.Action.ARCHIVE:
            memory = await self.restore(scope, handle, now)
        elif action is tiers.Action.PROMOTE and tier is not None:
            memory = await self.move(scope, handle, tier, now)
        if review_at is not None:
            memory = await self.set_review(scope, handle, review_at)
        return memory

    async def stats(self, scope: Scope, now: datetime) -> MemoryStats:
        everything = await self._store.fetch_memories(scope, EVERY_STATUS)
        active = [m for m in everything if m.is_active]
        week_ago = now - timedelta(days=7)
        return MemoryStats(
            by_tier={t: sum(m.tier is t for m in active) for t in Tier},
            by_type={t: sum(m.type is t for m in active) for t in MemoryType},
            archived=sum(m.status is Status.ARCHIVED for m in everything),
            superseded=sum(m.status is Status.SUPERSEDED for m in everything),
            learned_this_week=sum(m.created_at >= week_ago for m in active),
            evicted_this_week=sum(m.status_reason == StatusReason.EVICTED and m.updated_at >= week_ago
                                  for m in everything),
            pending_turns=await self._store.count_pending(scope),
        )
