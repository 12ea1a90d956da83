"""The user's steering as part of the engine's API (``MemoryEngine`` inherits it): save, undo a
rewording, edit, move, archive, restore, pins, search, provenance, reviews and counts. Each is done and
documented in ``companion.engine.steering.Curator``; a save is judged first by ``Learner``."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from companion.core import tiers
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, Tier
from companion.engine.learning import Learner
from companion.engine.steering import Curator
from companion.engine.types import MemoryStats, Provenance, Saved
from companion.storage.base import ACTIVE_ONLY


class SteeringAPI:
    _curator: Curator
    _learner: Learner

    async def save_explicit(
        self, scope: Scope, text: str, now: datetime, *, origin: Origin = Origin.EXPLICIT,
        source_chat_id: int | None = None, source_message_id: int | None = None, source_turns: Sequence[str] = (),
    ) -> Memory:
        """Remember what the user asked to remember (``save_said``) and return the stored memory."""
        saved = await self.save_said(scope, text, now, origin=origin, source_chat_id=source_chat_id,
                                     source_message_id=source_message_id, source_turns=source_turns)
        return saved.memory

    async def save_said(
        self, scope: Scope, text: str, now: datetime, *, origin: Origin = Origin.EXPLICIT,
        source_chat_id: int | None = None, source_message_id: int | None = None, source_turns: Sequence[str] = (),
    ) -> Saved:
        """Remember what the user asked to remember, at once, in the tier the model judges (a lasting
        core preference long-term, important information medium-term, the rest short-term). Works
        without the model: the words are kept as they are."""
        draft = await self._learner.judge(text, now)
        draft.origin, draft.source_at = origin, now
        draft.source_chat_id, draft.source_message_id = source_chat_id, source_message_id
        draft.source_turns = tuple(source_turns)
        return await self.save(scope, draft, now)

    async def save_draft(self, scope: Scope, draft: MemoryDraft, now: datetime) -> Memory:
        """``save`` and return the stored memory."""
        return (await self.save(scope, draft, now)).memory

    async def save(self, scope: Scope, draft: MemoryDraft, now: datetime) -> Saved:
        """Store one memory already judged (by the user's words, a model's tool call or an operator). The
        same fact retold merges into its row, which rises to the draft's tier if that is higher; told in
        other words, the result names the words it replaced (``undo_rewording`` puts them back). A
        different fact, however alike, is a memory of its own."""
        return await self._curator.save(scope, draft, now)

    async def undo_rewording(self, scope: Scope, handle: int, now: datetime, copy: int | None = None) -> Memory:
        """Put back the words a save or an extraction replaced in this memory (owner-checked): those kept
        as ``copy`` (``Saved.replaced.id``) when given, which must be its latest change. Raises
        NothingToUndoError when there are none."""
        return await self._curator.undo_rewording(scope, handle, now, copy)

    async def get(self, scope: Scope, handle: int) -> Memory:
        """One memory by handle, checked against its owner: another scope's handle is refused, never read."""
        return await self._curator.get(scope, handle)

    async def edit(
        self, scope: Scope, handle: int, text: str | None, now: datetime, *, importance: float | None = None
    ) -> Memory:
        return await self._curator.edit(scope, handle, text, now, importance=importance)

    async def move(self, scope: Scope, handle: int, tier: Tier, now: datetime) -> Memory:
        return await self._curator.move(scope, handle, tier, now)

    async def promote(self, scope: Scope, handle: int, now: datetime) -> Memory:
        return await self._curator.promote(scope, handle, now)

    async def keep(self, scope: Scope, handle: int, now: datetime) -> Memory:
        return await self._curator.keep(scope, handle, now)

    async def archive(self, scope: Scope, handle: int, now: datetime) -> Memory:
        return await self._curator.archive(scope, handle, now)

    async def restore(self, scope: Scope, handle: int, now: datetime) -> Memory:
        return await self._curator.restore(scope, handle, now)

    async def set_review(self, scope: Scope, handle: int, when: datetime) -> Memory:
        return await self._curator.set_review(scope, handle, when)

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        return await self._curator.touch(scope, ids, now)

    async def pin(self, scope: Scope, handle: int, pinned: bool, now: datetime) -> Memory:
        return await self._curator.pin(scope, handle, pinned, now)

    async def search(
        self, scope: Scope, query: str, now: datetime, *, statuses: Collection[Status] = ACTIVE_ONLY,
        tiers_: Collection[Tier] | None = None, types: Collection[MemoryType] | None = None,
        since: datetime | None = None, until: datetime | None = None, origins: Collection[Origin] | None = None,
        limit: int = 20, use: bool = False,
    ) -> list[Memory]:
        return await self._curator.search(scope, query, now, statuses=statuses, tiers_=tiers_, types=types,
                                          since=since, until=until, origins=origins, limit=limit, use=use)

    async def why(self, scope: Scope, handle: int) -> Provenance:
        return await self._curator.why(scope, handle)

    async def due_reviews(self, scope: Scope, now: datetime) -> list[tuple[Memory, tiers.Suggestion]]:
        return await self._curator.due_reviews(scope, now)

    async def review(self, scope: Scope, handle: int, action: tiers.Action, now: datetime) -> Memory:
        return await self._curator.review(scope, handle, action, now)

    async def stats(self, scope: Scope, now: datetime) -> MemoryStats:
        return await self._curator.stats(scope, now)
