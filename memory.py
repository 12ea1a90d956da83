"""The memory engine's API: remember, recall, build context, consolidate, decay, forget.

It composes the library parts (storage, keyword index, extraction, profile) and knows nothing about
Telegram or the bot's settings: a host builds it from an ``EngineConfig``, a store (``open_store(url)``),
a keyword extractor, an LLM client and a clock. Writes to one scope are serialised by a per-scope lock
(``ScopeLocks``); neither a lock nor a transaction spans an LLM call. A reply's turn is an object
(``open_turn`` returns a ``MemoryTurn``) that costs two store calls: its read and its ``finish``. The
user's steering (save, edit, archive, search, reviews...) is inherited from ``companion.engine.steering``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TypeVar

from companion.core.models import (
    Memory,
    MemoryDraft,
    Profile,
    Recalled,
    Scope,
    ShortItem,
    ShortKind,
    Status,
    Turn,
)
from companion.core.setting import LAST_DECAY_AT, LAST_EXTRACTION, Setting
from companion.core.timeutil import utcnow
from companion.engine.cache import DEFAULT_CACHE_MEMORIES, IndexCache
from companion.engine.consolidation import Consolidator
from companion.engine.context import ContextBuilder, MemoryTurn
from companion.engine.curator import Curator
from companion.engine.following import ChangeFeed, Follower, Forgetting, News
from companion.engine.followup_threads import FollowUps
from companion.engine.learner import Learner
from companion.engine.locks import ScopeLocks
from companion.engine.ports import KanbanPort, TypedSettings
from companion.engine.profile import ProfileService
from companion.engine.retrievers import DenseRetriever
from companion.engine.shortterm import ShortTermBook
from companion.engine.steering import SteeringAPI
from companion.engine.tools import Forget, memory_tools
from companion.engine.upkeep import Upkeep
from companion.engine.values import (
    Consolidation,
    DecayReport,
    EngineConfig,
    MemoryContext,
    MemoryStats,
    Provenance,
    Saved,
    ShortStats,
    Standing,
)
from companion.engine.writer import MemoryWriter
from companion.llm.embeddings import Embedder
from companion.llm.jsonmodel import JsonModel
from companion.llm.toolkit import ToolFactory
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import ACTIVE_ONLY, MemoryStore
from companion.storage.factory import open_store

V = TypeVar("V")

__all__ = [
    "Consolidation",
    "DecayReport",
    "EngineConfig",
    "Follower",
    "Forgetting",
    "MemoryContext",
    "MemoryEngine",
    "MemoryStats",
    "MemoryTurn",
    "News",
    "Provenance",
    "Saved",
    "ShortStats",
    "Standing",
]


class MemoryEngine(SteeringAPI):
    def __init__(
        self, store: MemoryStore, keywords: KeywordExtractor, config: EngineConfig, llm: JsonModel | None = None,
        dense: DenseRetriever | None = None, *, cache_memories: int = DEFAULT_CACHE_MEMORIES,
        clock: Callable[[], datetime] = utcnow, locks: ScopeLocks | None = None,
    ) -> None:
        self._store = store
        self._clock = clock  # UTC now, where a call takes no ``now``
        self.dense = dense  # semantic recall, when an embedding backend is configured
        self.keywords = keywords
        self.config = config
        self.llm = llm
        self.profiles = ProfileService(store, llm, config.tz, config.profile)
        self._short = ShortTermBook(store, config.tz)
        self._cache = IndexCache(store, keywords.keywords, cache_memories)
        # The derived copies that follow the change journal (``following``): the engine's own here, the
        # hosts' (a chat session, spool files) through ``follow``. Forget names none of them.
        self._feed = ChangeFeed(store)
        for copy in (self._cache, self.profiles, *((dense,) if dense is not None else ())):
            self._feed.register(copy)
        self._writer = MemoryWriter(store, keywords, self._cache, self.profiles, self._short, config.capacity, dense,
                                    locks, self._feed)
        self._learner = Learner(llm, keywords.keywords, config.tz)
        self._curator = Curator(store, self._writer, self.recall, dense, config.tz)
        self.followups = FollowUps(store, config.tz, self._writer)  # threads to follow up, written first by hosts
        # The doors for hosts' own state beside the memories: they hold these, never the store.
        self.settings = TypedSettings(store)  # typed settings by any key (a group's switches, a user's opt-ins)
        self.kanban = KanbanPort(store)  # the Dida365 kanban's rows and the journal it reads as its outbox
        self._context = ContextBuilder(store, keywords, self._cache, self.profiles, self._short, config,
                                       lambda: self.dense, self.followups)
        self._consolidator = Consolidator(store, self._writer, self._learner, self._short, self.recall,
                                          self._curator.get, clock, config.extract_max_turns, self.profiles)
        self._upkeep = Upkeep(store, self._writer, self._cache, self.profiles, self._short, dense)
        self._owns_store = False
        self._loading: asyncio.Future[None] | None = None

    @classmethod
    async def create(
        cls, store: MemoryStore, config: EngineConfig, keywords: KeywordExtractor, llm: JsonModel | None = None,
        *, embedder: Embedder | None = None, clock: Callable[[], datetime] = utcnow, locks: ScopeLocks | None = None,
    ) -> MemoryEngine:
        """An engine on an open store; loads the keyword dictionaries off the event loop. ``embedder``: the
        backend of semantic recall (owned by the engine from here on), None for keyword recall only;
        ``locks``: the per-scope write exclusion (one process's asyncio locks by default)."""
        # The dictionaries load in a thread while the bot finishes starting (Telegram and model checks); a
        # first message before they are ready waits for the rest of the load.
        keywords.add_words(config.important_keywords)
        loading = None if keywords.loaded else asyncio.wrap_future(keywords.preload())
        dense = await DenseRetriever.start(store, embedder, config.dense)
        cache = DEFAULT_CACHE_MEMORIES if config.cache_memories is None else config.cache_memories
        engine = cls(store, keywords, config, llm, dense, cache_memories=cache, clock=clock, locks=locks)
        engine._loading = loading
        return engine

    @classmethod
    async def open(
        cls, url: str, config: EngineConfig, keywords: KeywordExtractor, llm: JsonModel | None = None,
        *, embedder: Embedder | None = None, clock: Callable[[], datetime] = utcnow,
    ) -> MemoryEngine:
        """Open the store ``url`` names (``open_store``) and an engine that owns it (closed with it)."""
        store = await open_store(url)
        try:
            engine = await cls.create(store, config, keywords, llm, embedder=embedder, clock=clock)
        except BaseException:
            await store.close()
            raise
        engine._owns_store = True
        return engine

    async def ready(self) -> None:
        """Wait until the keyword dictionaries are loaded (raises what loading them raised)."""
        if self._loading is not None:
            await self._loading

    async def close(self) -> None:
        if self._loading is not None and not self._loading.done():
            await asyncio.wait([self._loading])  # a thread cannot be stopped: let it finish
        if self.dense is not None:
            await self.dense.close()
        if self._owns_store:
            await self._store.close()

    # ---- scope state -----------------------------------------------------------------------------

    async def active_scopes(self) -> set[Scope]:
        """Scopes with companion mode on (the flag survives restarts)."""
        return await self._store.active_scopes()

    async def await_edit(self, scope: Scope, handle: int | None) -> None:
        """The scope's next message is the new text of this memory (None: no longer), as every process
        sees it (``open_turn`` reads it as ``TurnView.editing``)."""
        await self._store.set_editing(scope, handle)

    async def companion_mode(self, scope: Scope) -> bool:
        """Whether the scope has companion mode on, as stored now (another process may have switched it)."""
        return (await self._store.turn_context(scope, events=0)).active

    async def hinted_at(self, scope: Scope) -> datetime | None:
        """When a "how to start" hint last went out to the scope, from any process (``hinted``)."""
        return (await self._store.turn_context(scope, events=0)).hinted_at

    async def hinted(self, scope: Scope, at: datetime) -> None:
        await self._store.set_hinted(scope, at)

    async def group_memory(self, scope: Scope) -> bool:
        """Whether the scope's group keeps memories (``GROUP_MEMORY``; a private scope always does)."""
        return (await self._store.turn_context(scope, events=0)).group_memory

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        await self._store.set_active(scope, active, now)
        if not active:
            self.profiles.invalidate(scope)

    @property
    def can_extract(self) -> bool:
        return self.llm is not None

    @property
    def extract_batch(self) -> int:
        """How many queued turns one extraction reads; a full batch means more may be waiting."""
        return self.config.extract_max_turns

    async def pending_count(self, scope: Scope) -> int:
        return await self._store.count_pending(scope)

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        return await self._store.pending_turns(scope, limit)

    async def scopes_with_pending(self) -> list[Scope]:
        return await self._store.scopes_with_pending()

    async def last_decay_at(self) -> datetime | None:
        return await self._store.get_setting(LAST_DECAY_AT, None)

    async def profile(self, scope: Scope) -> Profile | None:
        """The current profile (cached or persisted), or None before the first build."""
        current = await self.profiles.current(scope)
        return current[0] if current else None

    def lock(self, scope: Scope) -> AbstractAsyncContextManager[None]:
        """Serialises one scope's writes; other scopes never wait on it. Never held across a model call."""
        return self._writer.lock(scope)

    @property
    def locks(self) -> ScopeLocks:
        return self._writer.locks

    # ---- remember / forget -----------------------------------------------------------------------

    async def remember(
        self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime, *, embed: bool = True
    ) -> list[int]:
        """Store memories, merging a retold event into its existing row. Returns the ids of the rows
        written: new rows first, then rows a draft was merged into. ``embed=False`` leaves the vectors
        to a later batch (a bulk load; the next write or ``reindex`` embeds them)."""
        return await self._writer.remember(scope, drafts, now, embed=embed)

    async def forget(self, scope: Scope, ids: Iterable[int] | None = None, *, reason: str = "user") -> int:
        """Forget some memories, or all of a scope's when ``ids`` is None; returns how many went."""
        return len(await self.forget_memories(scope, ids, reason=reason))

    async def forget_memories(
        self, scope: Scope, ids: Iterable[int] | None = None, *, reason: str = "user"
    ) -> list[Memory]:
        """Forget and return what was forgotten (as it was). The text goes at once, everywhere: table,
        profile, vectors, short-term memory and the queued turns that told it (so a later extraction cannot
        bring it back), in one transaction; then every derived copy that follows the change feed (``follow``:
        the index, the cached profile, the vectors, a host's sessions and spools) is told, with what was
        forgotten as it was. A content-free tombstone stays."""
        return (await self._writer.forget(scope, ids, reason)).memories

    def follow(self, follower: Follower) -> None:
        """Register a derived copy of the memories (``companion.engine.following``): from now on it is told
        every change of every scope (``News``) after this process makes it, with what a forget took as it
        was, and another process's changes when a turn's read finds the counter moved (``open_turn``). Once
        is enough: forgetting needs no word from its owner."""
        self._feed.register(follower)

    def unfollow(self, follower: Follower) -> None:
        self._feed.unregister(follower)

    async def version(self, scope: Scope) -> int:
        """A number that moves whenever any of the scope's memories changes, whoever changed it (a page polls it)."""
        return await self._store.change_counter(scope)

    async def scopes_of(self, user_id: int) -> list[Scope]:
        """The user's scopes the store knows: their private chat and each group they have memories in."""
        return [scope for scope in await self._store.scopes() if scope.user_id == user_id]

    async def scopes(self) -> list[Scope]:
        """Every scope the store knows (ever written)."""
        return await self._store.scopes()

    async def clear_turns(self, scope: Scope) -> None:
        """Drop the scope's turns waiting for extraction (they would teach again what was forgotten)."""
        await self._store.clear_turns(scope)

    async def memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        """The scope's memories in these statuses (active by default), oldest first."""
        return await self._store.fetch_memories(scope, statuses)

    # ---- recall / context ------------------------------------------------------------------------

    async def recall(
        self, scope: Scope, text: str, now: datetime, *, turn: int = 0,
        cooldown: Mapping[int, int] | None = None, limit: int | bool | None = True,
        min_importance: float | None = None, keywords: Sequence[str] | None = None,
        earlier: Sequence[str] = (), reply: str | None = None, min_match: float | None = None,
        allowed: Collection[int] | None = None, earlier_since: datetime | None = None,
    ) -> list[Recalled]:
        """Memories this text touches, best first. ``limit=True`` means the configured cap; ``None``
        lifts it (benchmarks), as ``min_importance=0`` lifts the floor, ``min_match=0`` the gate and
        ``cooldown=None`` the cooldown. ``allowed``: the only memories that may be recalled (None: any).
        ``earlier`` (the user's previous turns, oldest first) and ``reply`` (the companion's last reply)
        join the query at a lower weight: a turn often names its topic only before ("它" for the dog).
        ``earlier_since``: when the oldest of ``earlier`` was said; a memory learned since then is recalled
        only by the text itself, never through those turns (they told it, and the reply call carries them)."""
        return await self._context.recall(scope, text, now, turn=turn, cooldown=cooldown, limit=limit,
                                          min_importance=min_importance, keywords=keywords, earlier=earlier,
                                          reply=reply, min_match=min_match, allowed=allowed,
                                          earlier_since=earlier_since)

    async def open_turn(self, scope: Scope, *, turns: int = 0) -> MemoryTurn:
        """A reply's turn, opened by its one read of the store: companion mode, the profile, today's events,
        the change counter (and the memories when the scope's index is not loaded; its newest ``turns``
        short-term turns when asked), as ``MemoryTurn.view``. The turn's calls need no other store call and
        ``MemoryTurn.finish`` is its one write (a journal read more when another process changed the scope
        since: ``ChangeFeed.catch_up``). Raises StorageError when the store cannot be read."""
        return await MemoryTurn.open(scope, self._context, self._feed, turns=turns)

    def unread_turn(self, scope: Scope) -> MemoryTurn:
        """A turn whose read failed (``open_turn`` raised): the same calls, each reading for itself."""
        return MemoryTurn(scope, None, self._context)

    def tools(self, *, forget: Forget | None = None) -> ToolFactory:
        """The memory tools a model may call, built per call for the caller's scope
        (``companion.engine.tools``); ``forget``: the host's, when it keeps its own copies to scrub."""
        return memory_tools(self, forget=forget, clock=self._clock)

    async def write_turn(
        self, scope: Scope, now: datetime, *, short: Turn | None = None, queued: Sequence[Turn] = (),
        conversation: str | None = None, said: bool | None = None,
    ) -> None:
        """What happened outside a reply's turn, in one write (a message written first, a conversation
        ended, turns queued late): as ``MemoryTurn.finish``, with no context shown."""
        said = bool(short is not None and short.user) if said is None else said
        await self._context.finish_turn(scope, now, short=short, queued=queued, shown=(), reply=None,
                                        conversation=conversation, said=said)

    async def warm_reply(self, text: str) -> None:
        """Semantic recall reads the companion's last reply with the next turn: encode it now, after the turn,
        not on the next reply's path. Nothing without semantic recall."""
        if self.dense is not None:
            await self.dense.warm(text)

    # ---- consolidation (extraction) --------------------------------------------------------------

    async def note_turn(self, scope: Scope, turn: Turn) -> None:
        """Queue a finished exchange for the next extraction; it stays queued until one succeeds."""
        await self._store.add_turn(scope, turn)

    async def consolidate(self, scope: Scope, now: datetime) -> Consolidation:
        """Extract memories from the queued turns. Raises LLMError and keeps the turns queued on failure."""
        return await self._consolidator.consolidate(scope, now)

    # ---- profile ---------------------------------------------------------------------------------

    async def refresh_profile(self, scope: Scope, now: datetime, *, force: bool = False) -> Profile | None:
        """Rebuild the profile if due (or forced). On an LLM failure keep and return the last one."""
        if not force and not await self.profiles.due(scope, now):
            current = await self.profiles.current(scope)
            return current[0] if current else None
        return await self.profiles.rebuild(scope, now, self.lock)

    # ---- decay -----------------------------------------------------------------------------------

    async def decay(self, now: datetime, batch: int = 200) -> DecayReport:
        """Daily decay and cleanup over every scope, in short transactions so chats are not held up."""
        return await self._upkeep.decay(now, batch)

    # ---- per-scope settings (review bookkeeping, opt-ins) -----------------------------------------

    async def setting(self, setting: Setting[Scope, V], scope: Scope) -> V | None:
        return await self._store.get_setting(setting, scope)

    async def set_setting(self, setting: Setting[Scope, V], scope: Scope, value: V) -> None:
        await self._store.set_setting(setting, scope, value)

    # ---- conversation summaries --------------------------------------------------------------------

    async def summarise(self, scope: Scope, turns: Sequence[Turn], now: datetime) -> Memory | None:
        """A short-term memory summing up a conversation that had something worth keeping, or None.
        Raises LLMError when the model cannot answer."""
        return await self._consolidator.summarise(scope, turns, now)

    # ---- short-term memory: kept in the database, so a restart forgets nothing -------------------

    async def record_turn(
        self, scope: Scope, user: str, reply: str | None, at: datetime, *, recalled: bool, key: str | None = None
    ) -> None:
        """Keep a finished exchange as short-term memory (the newest 200 stay); ``key``: the turn's key."""
        await self._short.record_turn(scope, user, reply, at, recalled=recalled, key=key)

    async def recent_turns(self, scope: Scope, limit: int) -> list[ShortItem]:
        return await self._short.turns(scope, limit)

    async def today_events(self, scope: Scope, now: datetime) -> list[str]:
        """What the user reported today (local day), oldest first."""
        return await self._short.today_events(scope, now)

    async def clear_short_term(self, scope: Scope, kind: ShortKind | None = None) -> None:
        await self._short.clear(scope, kind)

    async def short_stats(self, scope: Scope) -> ShortStats:
        """Counts per kind, the share of kept turns that carried a recalled memory, the last extraction."""
        turns = await self._short.turns(scope)
        events = await self._short.events(scope)
        last = await self.setting(LAST_EXTRACTION, scope)
        return ShortStats(len(turns), len(events), sum(t.recalled for t in turns) / len(turns) if turns else 0.0,
                          last)

    # ---- a group chat that changed its id (upgraded to a supergroup) -----------------------------

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """Move every (old chat, user) scope to (new chat, user); returns the old scopes moved (none when
        already moved)."""
        return await self._upkeep.move_chat(old_chat_id, new_chat_id, now)

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        """Durably note that the group ``old`` is moving to ``new``, before anything of it moves: a move a
        crash cuts short (Telegram sends its notice once) is then finished by ``finish_moves``."""
        await self._upkeep.begin_move(old_chat_id, new_chat_id, now)

    async def finish_moves(self, now: datetime) -> list[tuple[int, int, list[Scope]]]:
        """At start-up: finish every move begun and not finished; (old id, new id, old scopes moved)."""
        return await self._upkeep.finish_moves(now)
