"""The user's steering as part of the engine's API (``MemoryEngine`` inherits it): save, undo a
rewording, edit, move, archive, restore, pins, search, provenance, reviews and counts. Each is done and
documented in ``companion.engine.curator.Curator``; a save is judged first by ``Learner``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from companion.core.models import Memory, MemoryDraft, Origin, Scope
from companion.engine.curator import Curator
from companion.engine.learner import Learner
from companion.engine.values import Saved

P = ParamSpec("P")
R = TypeVar("R")


def _curated(
    method: Callable[Concatenate[Curator, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SteeringAPI, P], Coroutine[Any, Any, R]]:
    """``Curator``'s method as the engine's: the same signature and docstring, said once."""

    @functools.wraps(method)
    async def delegate(self: SteeringAPI, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await method(self._curator, *args, **kwargs)

    return delegate


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
        saved = await self.save(scope, draft, now)
        return replace(saved, date_unclear=draft.date_unclear) if draft.date_unclear else saved

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

    # The rest is the curator's own, one signature and docstring (``_curated``).
    get = _curated(Curator.get)
    edit = _curated(Curator.edit)
    move = _curated(Curator.move)
    promote = _curated(Curator.promote)
    keep = _curated(Curator.keep)
    archive = _curated(Curator.archive)
    restore = _curated(Curator.restore)
    set_review = _curated(Curator.set_review)
    touch = _curated(Curator.touch)
    pin = _curated(Curator.pin)
    search = _curated(Curator.search)
    why = _curated(Curator.why)
    due_reviews = _curated(Curator.due_reviews)
    review = _curated(Curator.review)
    undo_review = _curated(Curator.undo_review)
    stats = _curated(Curator.stats)
