"""A reply's turn on one scope and what it is told.

``MemoryEngine.open_turn`` reads what the reply needs in one store call and hands back a ``MemoryTurn``; its
calls (the context, the words memory already holds, the group's candidates) work from what that read
primed, and ``finish`` writes what happened in one store call. The store-call budget of a turn is the
shape of that class: nothing between the read and the write reaches the store while the scope's caches
stay loaded. A turn whose read failed (the database locked or down) is ``unread``: the same calls, each
reading what it needs for itself, so the companion answers with whatever memory can still be read.

Behind it, the ``ContextBuilder``: the profile core and the traits the turn touches, the recalled
memories, standing instructions, what was learned and reported today, each memory once; which recalled
memories the reply then mentioned; recall itself (the index, then the dense half when there is one); and
the turn's two store calls (``open_turn`` reads at once and primes the caches, ``finish_turn`` writes at
once)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import date, datetime
from enum import Enum

from companion.core import dates
from companion.core.models import Memory, MemoryType, Profile, Recalled, Scope, ShortItem, Turn
from companion.core.turnview import TurnView
from companion.engine.cache import IndexCache
from companion.engine.following import ChangeFeed
from companion.engine.followup_threads import FollowUps
from companion.engine.profile import ProfileService, matching_traits
from companion.engine.retrievers import DenseRetriever
from companion.engine.shortterm import SHORT_TURNS_KEPT, TODAY_EVENTS_KEPT, ShortTermBook
from companion.engine.values import EngineConfig, MemoryContext, Standing
from companion.recall.index import RecallFilter, ScopeIndex, mentions
from companion.recall.keywords import KeywordExtractor
from companion.recall.query import build_query
from companion.storage.base import MemoryStore, TurnRecord

MAX_SCHEDULED = 8  # dated memories a question about time is told
# A long message often gets to the point at the end ("...对了，小王生日是哪天？"): read all of it.
MAX_QUERY_TERMS = 48


class Reads(Enum):
    """Where a context's cached state comes from: brought up to the store first, or as observed."""

    LIVE = "live"  # each cache reads the scope's change counter first (a context on its own)
    OBSERVED = "observed"  # as this turn's read left the caches (``open_turn``): no store call


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


class ContextBuilder:
    def __init__(self, store: MemoryStore, keywords: KeywordExtractor, cache: IndexCache, profiles: ProfileService,
                 short: ShortTermBook, config: EngineConfig, dense: Callable[[], DenseRetriever | None],
                 followups: FollowUps) -> None:
        self._store = store
        self._followups = followups
        self._keywords = keywords
        self._cache = cache
        self._profiles = profiles
        self._short = short
        self._config = config
        self._dense = dense  # the engine's, read at each recall (a benchmark switches it off and on)

    def query_words(self, text: str) -> list[str]:
        return self._keywords.keywords(text, limit=MAX_QUERY_TERMS)

    async def recall(
        self, scope: Scope, text: str, now: datetime, *, turn: int = 0,
        cooldown: Mapping[int, int] | None = None, limit: int | bool | None = True,
        min_importance: float | None = None, keywords: Sequence[str] | None = None,
        earlier: Sequence[str] = (), reply: str | None = None, min_match: float | None = None,
        allowed: Collection[int] | None = None, reads: Reads = Reads.LIVE, earlier_since: datetime | None = None,
    ) -> list[Recalled]:
        """``MemoryEngine.recall``, from the recall index as ``reads`` finds it."""
        words = self.query_words
        given = {text: list(keywords)} if keywords is not None else {}
        # Given keywords stand for the current turn only; earlier turns and the reply are segmented here.
        query = build_query(text, lambda t: given[t] if t in given else words(t), earlier=earlier, reply=reply,
                            distinctive=self._keywords.distinctive)
        if not query:
            return []
        index = await self.index(scope, reads)
        config = self._config
        rules = RecallFilter(
            limit=config.recall_max if limit is True else (None if limit is None else int(limit)),
            min_importance=config.recall_min_importance if min_importance is None else min_importance,
            min_match=config.recall_min_match if min_match is None else min_match,
            cooldown_turns=config.recall_cooldown_turns,
            turn=turn,
            cooldown=cooldown,
            allowed=allowed,
            window_since=earlier_since if earlier else None,
        )
        dense = self._dense()
        ranked = index.rank(query, now, rules if dense is None else dense.widen(rules))
        if dense is None:
            return ranked
        return await dense.fuse(scope, text, now, rules, ranked, earlier=earlier, reply=reply)

    async def index(self, scope: Scope, reads: Reads) -> ScopeIndex:
        return await (self._cache.index(scope) if reads is Reads.LIVE else self._cache.observed(scope))

    async def events(self, scope: Scope, reads: Reads) -> list[ShortItem]:
        return await (self._short.events(scope) if reads is Reads.LIVE else self._short.observed(scope))

    async def open_turn(self, scope: Scope, *, turns: int = 0) -> TurnView:
        """One read for the reply: the caches take the change counter, the profile, today's events and, when
        the scope's index is not loaded, its memories."""
        view = await self._store.turn_context(scope, events=TODAY_EVENTS_KEPT, turns=turns,
                                              memories=self._cache.cached(scope) is None)
        if view.memories is not None:
            self._cache.load(scope, view.memories, view.change)
        else:
            await self._cache.observe(scope, view.change)  # changed since: the journal says what (more calls)
        self._profiles.prime(scope, view.profile)
        self._short.prime(scope, view.change, view.events)
        return view

    async def build(
        self, scope: Scope, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int],
        allow_recall: bool, earlier: Sequence[str], reply: str | None, reads: Reads = Reads.LIVE,
        earlier_since: datetime | None = None, follow_up: Mapping[int, int] | None = None,
    ) -> MemoryContext:
        """The context of one reply; no write (the caller records the recalled memories' accesses)."""
        keywords = self.query_words(text)
        index = await self.index(scope, reads)  # brought up to date first: a change drops the candidates
        standing = self._cache.standing_of(scope, index, now)
        # Every active memory may be recalled, whatever its tier (tiers decide reviews, decay, eviction and
        # what the profile is built from first); the gate weighs the best few, as measured in BENCHMARKS.md.
        recalled = (
            await self.recall(scope, text, now, turn=turn, cooldown=cooldown, keywords=keywords,
                              # the index was just brought up to date
                              earlier=earlier, reply=reply, reads=Reads.OBSERVED, earlier_since=earlier_since)
            if allow_recall else []
        )
        current = await self._profiles.current(scope)
        profile = current[0] if current else Profile(core="")
        # The newest lasting facts the profile core does not know yet go with it: all of them while there is
        # no core (none built yet, or a forget dropped it until the next build), so forgetting one fact never
        # hides the others for a turn; else those learned after the core was built, until a rebuild takes
        # them in (they are only shown as learned today on their first day, below). A user back after some
        # days is not told about without what they said last time.
        unsaid = [e for e in unprofiled(standing, profile.built_at if profile.core else None)
                  if e not in standing.recent and not _said_in(profile.core, e)]
        # Every fact learned since the profile was built is in view, newest first; past the profile's own
        # budget the profile is rebuilt at the next extraction, which takes them in; a hard bound (the model
        # down for days) keeps the prompt from growing without end.
        budget = self._profiles.policy.max_chars
        if sum(map(len, unsaid)) + sum(map(len, standing.recent)) > budget:
            self._profiles.overflow(scope)
        unsaid = _within(unsaid, UNPROFILED_BOUND * budget)
        core = "；".join([profile.core, *unsaid] if profile.core else unsaid)
        # Each memory once in the prompt: what the profile core already says is not recalled again, and what
        # is recalled is not repeated as learned today or done today.
        recalled = [r for r in recalled if not _said_in(core, r.memory.event)]
        shown = {r.memory.event for r in recalled}
        recent = [e for e in dict.fromkeys(standing.recent) if e not in shown and not _said_in(core, e)]
        today = [e for e in dict.fromkeys(self._short.today(await self.events(scope, reads), now))
                 if e not in shown and e not in recent]
        local_today = now.astimezone(self._config.tz).date()
        asked = dates.question_range(text, local_today)
        scheduled = [] if asked is None else [
            m.shown for m in scheduled_on(index, asked, local_today) if m.event not in shown]
        followup = None
        if follow_up is not None and scope.chat_id is None:  # a group's memories are not followed up in public
            followup = await self._followups.cue(scope, index.memories.values(), now, follow_up)
        return MemoryContext(
            core=core, dynamic=matching_traits(profile, keywords), recalled=recalled, keywords=keywords,
            instructions=standing.instructions, recent=recent, today=today, asked=asked, scheduled=scheduled,
            followup=followup,
        )

    async def finish_turn(
        self, scope: Scope, now: datetime, *, short: Turn | None, queued: Sequence[Turn],
        shown: Sequence[Recalled], reply: str | None, accessed: Sequence[int] = (), conversation: str | None = None,
        said: bool = False,
    ) -> list[int]:
        """One write: the short-term turn, the queued turns, an access for each of ``accessed``, a mention for
        each ``shown`` memory the ``reply`` mentions (whose ids it returns) and the host's ``conversation``
        state (``TurnRecord``)."""
        mentioned = [r.memory.id for r in shown if reply and mentions(reply, r.memory)]
        record = TurnRecord(at=now, short=short, keep=SHORT_TURNS_KEPT, recalled=bool(shown), queued=queued,
                            touched=list(accessed), mentioned=mentioned,
                            conversation=conversation, said_at=now if said else None)
        if (record.short is not None or record.queued or record.touched or record.mentioned
                or conversation is not None):
            await self._store.record_turn(scope, record)
        self._cache.mentioned(scope, mentioned, now)
        return mentioned


def unprofiled(standing: Standing, built_at: datetime | None) -> list[str]:
    """The lasting facts a profile core built at ``built_at`` (None: no core) does not know yet."""
    return [m.event for m in standing.lasting if built_at is None or m.created_at > built_at]


def scheduled_on(index: ScopeIndex, days: tuple[date, date], today: date, limit: int = MAX_SCHEDULED) -> list[Memory]:
    """The index's active memories that happen on ``days`` (inclusive), in date order (past ranges newest
    first): a question about time costs no store call."""
    start, end = days
    found = [m for m in index.memories.values()
             if m.is_active and m.happens is not None and dates.overlaps(m.happens, start, end, today)]
    past = end <= today
    found.sort(key=lambda m: dates.next_occurrence(m.happens, start) if m.happens else start, reverse=past)
    return found[:limit]


UNPROFILED_BOUND = 3  # times the profile's budget: what the facts beside it may take while it cannot be rebuilt


def _within(texts: Sequence[str], chars: int) -> list[str]:
    """The first ``texts`` (newest first) whose lengths add up to at most ``chars``."""
    kept: list[str] = []
    for text in texts:
        chars -= len(text)
        if chars < 0:
            break
        kept.append(text)
    return kept


def _said_in(core: str, event: str) -> bool:
    """The profile core already carries these words (an event's leading date aside)."""
    words = event.split(" ", 1)[1] if event[:4].isdigit() and " " in event else event
    return bool(words) and words in core
