"""A reply's unit of work on one scope: ``MemoryEngine.open_turn`` reads what the reply needs in one store
call and hands back a ``MemoryTurn``; its calls (the context, the words memory already holds, the group's
candidates) work from what that read primed, and ``finish`` writes what happened in one store call. The
store-call budget of a turn is the shape of this class: nothing between the read and the write reaches the
store while the scope's caches stay loaded.

A turn whose read failed (the database locked or down) is ``unread``: the same calls, each reading what it
needs for itself, so the companion answers with whatever memory can still be read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from companion.core.models import Memory, MemoryType, Recalled, Scope, Turn
from companion.core.turnview import TurnView
from companion.engine.context import ContextBuilder, Reads
from companion.engine.following import ChangeFeed
from companion.engine.values import MemoryContext


class MemoryTurn:
    """One reply's work on ``scope``: made by ``MemoryEngine.open_turn`` (``view`` is that read) or
    ``MemoryEngine.unread_turn`` (``view`` is None)."""

    def __init__(self, scope: Scope, view: TurnView | None, builder: ContextBuilder) -> None:
        self.scope = scope
        self.view = view
        self._builder = builder
        self._reads = Reads.LIVE if view is None else Reads.OBSERVED
        self._recalled: list[int] = []  # what this turn's context recalled: an access each, at ``finish``

    @classmethod
    async def open(cls, scope: Scope, builder: ContextBuilder, feed: ChangeFeed, *, turns: int = 0) -> MemoryTurn:
        """The turn after its one read (``ContextBuilder.open_turn``); what another process changed since
        reaches this process's derived copies (``following``) before the turn uses them (a journal read more
        only when the counter moved past what this process wrote)."""
        view = await builder.open_turn(scope, turns=turns)
        await feed.catch_up(scope, view.change)
        return cls(scope, view, builder)

    async def context(
        self, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int], allow_recall: bool = True,
        earlier: Sequence[str] = (), reply: str | None = None, earlier_since: datetime | None = None,
        follow_up: Mapping[int, int] | None = None,
    ) -> MemoryContext:
        """What the reply is told (``ContextBuilder.build``); the memories it recalls get an access
        each in ``finish``'s write."""
        context = await self._builder.build(self.scope, text, now, turn=turn, cooldown=cooldown,
                                            allow_recall=allow_recall, earlier=earlier, reply=reply,
                                            reads=self._reads, earlier_since=earlier_since, follow_up=follow_up)
        self._recalled.extend(r.memory.id for r in context.recalled)
        return context

    async def known_words(self, words: Iterable[str]) -> set[str]:
        """Those of ``words`` an active memory of the scope already holds (the recall index)."""
        index = await self._builder.index(self.scope, self._reads)
        return {word for word in words if index.holds(word)}

    async def memories(self) -> list[Memory]:
        """The scope's active memories, from the recall index."""
        return list((await self._builder.index(self.scope, self._reads)).memories.values())

    async def shared(self, private: Scope, text: str, now: datetime) -> list[Memory]:
        """What the speaker's private memories lend a group turn: those ``text`` recalls, then the standing
        instructions. Another scope than the turn's, so it costs one look at its change counter."""
        recalled = [r.memory for r in await self._builder.recall(private, text, now, cooldown=None)]
        index = await self._builder.index(private, Reads.OBSERVED)  # the recall just brought it up to date
        return recalled + [m for m in index.memories.values() if m.type is MemoryType.INSTRUCTION]

    async def finish(
        self, now: datetime, *, short: Turn | None = None, queued: Sequence[Turn] = (),
        shown: Sequence[Recalled] = (), reply: str | None = None, conversation: str | None = None,
        said: bool | None = None,
    ) -> list[int]:
        """The turn's one write, all or nothing: ``short`` kept as short-term memory, ``queued`` for the next
        extraction (oldest first), an access for each memory the context recalled, a mention for each
        ``shown`` memory the ``reply`` mentions, whose ids it returns, and the host's ``conversation`` state,
        which the next ``open_turn`` in any process reads back (None: as it is; "": none). ``said``: the user
        said something this turn (None: whether ``short`` has their words)."""
        said = bool(short is not None and short.user) if said is None else said
        accessed, self._recalled = self._recalled, []
        return await self._builder.finish_turn(self.scope, now, short=short, queued=queued, shown=shown, reply=reply,
                                               accessed=accessed, conversation=conversation, said=said)
