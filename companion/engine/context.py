"""What one reply is told about the user: the profile core and the traits the turn touches, the recalled
memories, standing instructions, what was learned and reported today, each memory once; and which
recalled memories the reply then mentioned."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from companion.core.models import Profile, Recalled, Scope
from companion.engine.cache import IndexCache
from companion.engine.profile import ProfileService, matching_traits
from companion.engine.shortterm import ShortTermBook
from companion.engine.types import MemoryContext
from companion.recall.index import mentions
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore

# A long message often gets to the point at the end ("...对了，小王生日是哪天？"): read all of it.
MAX_QUERY_TERMS = 48


class ContextRecall(Protocol):
    async def __call__(self, scope: Scope, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int],
                       keywords: Sequence[str], earlier: Sequence[str], reply: str | None) -> list[Recalled]: ...


class ContextBuilder:
    def __init__(self, store: MemoryStore, keywords: KeywordExtractor, cache: IndexCache, profiles: ProfileService,
                 short: ShortTermBook, recall: ContextRecall) -> None:
        self._store = store
        self._keywords = keywords
        self._cache = cache
        self._profiles = profiles
        self._short = short
        self._recall = recall

    def query_words(self, text: str) -> list[str]:
        return self._keywords.keywords(text, limit=MAX_QUERY_TERMS)

    async def build(
        self, scope: Scope, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int],
        allow_recall: bool, earlier: Sequence[str], reply: str | None,
    ) -> MemoryContext:
        keywords = self.query_words(text)
        standing = await self._cache.standing(scope, now)
        # Every active memory may be recalled, whatever its tier (tiers decide reviews, decay, eviction and
        # what the profile is built from first); the gate weighs the best few, as measured in BENCHMARKS.md.
        recalled = (
            await self._recall(scope, text, now, turn=turn, cooldown=cooldown, keywords=keywords,
                               earlier=earlier, reply=reply)
            if allow_recall else []
        )
        current = await self._profiles.current(scope)
        profile = current[0] if current else Profile(core="")
        # Each memory once in the prompt: what the profile core already says is not recalled again, and what
        # is recalled is not repeated as learned today or done today.
        recalled = [r for r in recalled if not _said_in(profile.core, r.memory.event)]
        shown = {r.memory.event for r in recalled}
        recent = [e for e in dict.fromkeys(standing.recent) if e not in shown and not _said_in(profile.core, e)]
        today = [e for e in dict.fromkeys(await self._short.today_events(scope, now))
                 if e not in shown and e not in recent]
        if recalled:
            await self._store.touch(scope, [r.memory.id for r in recalled], now)
        return MemoryContext(
            core=profile.core, dynamic=matching_traits(profile, keywords), recalled=recalled, keywords=keywords,
            instructions=standing.instructions, recent=recent, today=today,
        )

    async def mark_mentioned(
        self, scope: Scope, reply: str, recalled: Sequence[Recalled], now: datetime
    ) -> list[int]:
        ids = [r.memory.id for r in recalled if mentions(reply, r.memory)]
        if ids:
            await self._store.mark_mentioned(scope, ids, now)
            await self._cache.add(scope, ids)
        return ids


def _said_in(core: str, event: str) -> bool:
    """The profile core already carries these words (an event's leading date aside)."""
    words = event.split(" ", 1)[1] if event[:4].isdigit() and " " in event else event
    return bool(words) and words in core
