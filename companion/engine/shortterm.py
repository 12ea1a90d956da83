"""Short-term memory kept in the database, so a restart forgets nothing: the conversation's turns (the
newest 200) and what the user reported today (the newest 30), plus its scrubbing when the user forgets."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime, tzinfo

from companion.core.extraction import tells
from companion.core.models import Memory, Scope, ShortItem, ShortKind
from companion.core.timeutil import local_date
from companion.storage.base import MemoryStore

SHORT_TURNS_KEPT = 200
TODAY_EVENTS_KEPT = 30
EVENT_CACHE_SCOPES = 4096
QUEUE_SCANNED = 10_000


class ShortTermBook:
    def __init__(self, store: MemoryStore, tz: tzinfo) -> None:
        self._store = store
        self._tz = tz
        # Each reply reads today's events: kept per scope (least recently used out) with the scope's change
        # counter they were read at; any change of the scope since (events added or dropped by any process,
        # memories written) reads them again.
        self._events: OrderedDict[Scope, tuple[int, list[ShortItem]]] = OrderedDict()

    async def record_turn(
        self, scope: Scope, user: str, reply: str | None, at: datetime, *, recalled: bool, key: str | None = None
    ) -> None:
        await self._store.add_short(scope, ShortKind.TURN, user, reply, at, keep=SHORT_TURNS_KEPT, recalled=recalled,
                                    keys=() if key is None else (key,))

    async def add_event(self, scope: Scope, event: str, at: datetime, keys: Sequence[str] = ()) -> None:
        """``keys``: the turns that told it (an extraction batch's), so forgetting what they told drops it."""
        self._events.pop(scope, None)
        await self._store.add_short(scope, ShortKind.EVENT, event, None, at, keep=TODAY_EVENTS_KEPT, keys=keys)

    async def turns(self, scope: Scope, limit: int = SHORT_TURNS_KEPT) -> list[ShortItem]:
        return await self._store.short_items(scope, ShortKind.TURN, limit)

    def prime(self, scope: Scope, counter: int, events: list[ShortItem]) -> None:
        """The scope's newest events and its change counter, read together with a turn's context."""
        self._events[scope] = (counter, events)
        self._events.move_to_end(scope)
        if len(self._events) > EVENT_CACHE_SCOPES:
            self._events.popitem(last=False)

    async def events(self, scope: Scope) -> list[ShortItem]:
        """The scope's newest events, read again when its change counter moved (one counter read)."""
        cached = self._events.get(scope)
        counter = await self._store.change_counter(scope)
        if cached is None or cached[0] != counter:
            cached = self._events[scope] = (
                counter, await self._store.short_items(scope, ShortKind.EVENT, TODAY_EVENTS_KEPT))
            if len(self._events) > EVENT_CACHE_SCOPES:
                self._events.popitem(last=False)
        self._events.move_to_end(scope)
        return cached[1]

    async def observed(self, scope: Scope) -> list[ShortItem]:
        """The events as the turn's read left them (``prime``): no store call while they stay cached."""
        cached = self._events.get(scope)
        if cached is None:
            return await self.events(scope)
        self._events.move_to_end(scope)
        return cached[1]

    def today(self, events: Sequence[ShortItem], now: datetime) -> list[str]:
        """Of ``events``, what the user reported today (local day), oldest first."""
        day = local_date(now, self._tz)
        return [i.user for i in events if local_date(i.at, self._tz) == day]

    async def today_events(self, scope: Scope, now: datetime) -> list[str]:
        return self.today(await self.events(scope), now)

    async def clear(self, scope: Scope, kind: ShortKind | None = None) -> None:
        self._events.pop(scope, None)
        await self._store.drop_short(scope, kind=kind)

    def drop_cached(self, scope: Scope) -> None:
        self._events.pop(scope, None)

    async def telling(self, scope: Scope, forgotten: Sequence[Memory]) -> tuple[list[int], list[int]]:
        """The kept items and the queued turns whose words tell what is about to be forgotten: (short-term
        item ids, queued turn ids). The turns a memory came from go by their keys, whatever the words
        (``MemoryStore.forget_everywhere``); this adds retellings of memories without provenance."""
        if not forgotten:
            return [], []
        kept = [*await self.turns(scope), *await self.events(scope)]
        short = [item.id for item in kept
                 if any(tells(item.user, m) or (item.reply and tells(item.reply, m)) for m in forgotten)]
        queued = [t.id for t in await self._store.pending_turns(scope, QUEUE_SCANNED)
                  if t.id is not None and any(tells(t.user, m) for m in forgotten)]
        return short, queued
