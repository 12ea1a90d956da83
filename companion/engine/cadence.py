"""When a conversation is learned from, one rule for every host: each answered turn counts down to the next
extraction (every few turns, a random count in a range) or triggers one at once when it tells news (an
important word, about something no memory holds yet); extraction runs in the background, batch after batch
while turns wait, and then rebuilds the profile when it is due. The Telegram bot's chat service keeps the
countdown in its session (``companion.chat.learning``); the AstrBot plugin keeps a ``Countdown`` per scope.

``LearningEngine`` is what this needs of ``memory.MemoryEngine``, so this module stays below it."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Collection, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from companion.core.errors import CompanionError, LLMError, StorageError
from companion.core.models import Profile, Scope
from companion.engine.context import MemoryTurn
from companion.engine.values import Consolidation

log = logging.getLogger(__name__)

NEWS_QUIET_TURNS = 12  # an important word triggers again only after this many turns
NEWS_MIN_GAP = 3  # turns since the last extraction for news before news triggers another one


class Things(Protocol):
    def things(self, text: str) -> list[str]: ...


class LearningEngine(Protocol):
    @property
    def keywords(self) -> Things: ...

    @property
    def extract_batch(self) -> int: ...

    async def consolidate(self, scope: Scope, now: datetime) -> Consolidation: ...

    async def refresh_profile(self, scope: Scope, now: datetime, *, force: bool = False) -> Profile | None: ...


class Counting(Protocol):
    """A scope's countdown as a host keeps it (the chat ``Session`` has these fields; else a ``Countdown``).
    ``turn`` is the host's turn number, moved on by the host before each ``count_turn``."""

    turn: int
    since_extraction: int
    extract_at: int
    news_turns: dict[str, int]
    news_waiting: bool
    last_extraction_turn: int | None


@dataclass(slots=True)
class Countdown:
    """A scope's countdown for a host without a session of its own (kept in memory: a restart starts over)."""

    extract_at: int
    turn: int = 0
    since_extraction: int = 0
    news_turns: dict[str, int] = field(default_factory=dict)
    news_waiting: bool = False
    last_extraction_turn: int | None = None


class Cadence:
    """The countdown's rule and the background work it starts (extractions, profile rebuilds)."""

    def __init__(self, engine: LearningEngine, clock: Callable[[], datetime], rng: random.Random, *,
                 extract_every: tuple[int, int], important_keywords: Collection[str]) -> None:
        self.engine = engine
        self.clock = clock
        self._rng = rng
        self._every = extract_every
        self._important = tuple(important_keywords)
        self._tasks: set[asyncio.Task[None]] = set()
        self._extracting: set[Scope] = set()
        self._refreshing: set[Scope] = set()

    def next_extraction(self) -> int:
        return self._rng.randint(*self._every)

    def countdown(self) -> Countdown:
        return Countdown(extract_at=self.next_extraction())

    async def count_turn(self, memory: MemoryTurn, state: Counting, text: str) -> bool:
        """Count an answered turn of ``memory`` toward the next extraction; True when one is due (``extract``
        starts it, once the turn is queued)."""
        state.since_extraction += 1
        state.news_waiting |= await self._is_news(memory, state, text)
        # News told in quick succession ("感冒了……还有我要搬家了") shares one extraction call.
        last = state.last_extraction_turn
        news_due = state.news_waiting and (last is None or state.turn - last >= NEWS_MIN_GAP)
        if not (news_due or state.since_extraction >= state.extract_at):
            return False
        if news_due:
            # Only news holds news back: after a regular extraction, a second allergy told next is not made to
            # wait for the gap.
            state.last_extraction_turn = state.turn
        state.news_waiting = False
        state.since_extraction = 0
        state.extract_at = self.next_extraction()
        return True

    async def _is_news(self, memory: MemoryTurn, state: Counting, text: str) -> bool:
        """A turn on a life topic (an important word) extracts at once when it tells something new: the
        topic itself the first time, or a detail of it no memory of the scope holds yet ("对了我对虾也过敏"
        after "我对花生过敏", a second pet, a new job). Retelling what is known ("我对花生过敏你知道的") and
        talking on about it (a cold over several turns) wait for the regular extraction instead of paying
        for one per mention; a word that triggered stays quiet for a while; the turn is queued either way,
        so nothing it tells is lost."""
        topics = [word for word in self._important if word in text]
        if not topics:
            return False
        # A detail names a thing or someone (虾, 年糕, 芒果), not the everyday words around a topic ("准备", "算了"),
        # which would cost an extraction per mention.
        details = [word for word in self.engine.keywords.things(text) if word not in topics]
        said = [
            word for word in dict.fromkeys([*topics, *details])
            if state.turn - state.news_turns.get(word, -NEWS_QUIET_TURNS) >= NEWS_QUIET_TURNS
        ]
        if not said:
            return False
        for word in said:
            state.news_turns[word] = state.turn
        try:
            known = await memory.known_words(said)
        except StorageError as exc:
            log.warning("could not read what %s already knows; treating the turn as news: %s", memory.scope.key, exc)
            known = set()
        return bool(set(said) - known)

    # ---- background work -------------------------------------------------------------------------

    def extract(self, scope: Scope) -> None:
        """Extract the scope's queued turns in the background, then rebuild its profile when due."""
        self._extracting.add(scope)
        self._spawn(self._consolidate(scope), f"extract-{scope.key}")

    def refresh_profile(self, scope: Scope) -> None:
        """Rebuild the scope's profile in the background when it is due (none while an extraction runs:
        that one rebuilds it after, with what the turns told)."""
        if scope not in self._refreshing and scope not in self._extracting:
            self._spawn(self._refresh_profile(scope), f"profile-{scope.key}")

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _consolidate(self, scope: Scope) -> None:
        try:
            while True:
                result = await self.engine.consolidate(scope, self.clock())
                if result.turns < self.engine.extract_batch:
                    break
        except LLMError as exc:
            log.warning("extraction for %s failed, turns stay queued: %s", scope.key, exc)
            return
        except CompanionError:
            log.exception("extraction for %s failed", scope.key)
            return
        finally:
            self._extracting.discard(scope)
        await self._refresh_profile(scope)

    async def _refresh_profile(self, scope: Scope) -> None:
        if scope in self._refreshing:
            return
        self._refreshing.add(scope)
        try:
            await self.engine.refresh_profile(scope, self.clock())
        except LLMError as exc:
            log.warning("profile refresh for %s failed, keeping the last one: %s", scope.key, exc)
        except CompanionError:
            log.exception("profile refresh for %s failed", scope.key)
        finally:
            self._refreshing.discard(scope)

    async def drain(self) -> None:
        """Wait for the background extractions and profile rebuilds."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def cancel(self) -> None:
        """Stop the background work (a host shutting down); what it did not finish stays queued."""
        for task in list(self._tasks):
            task.cancel()
