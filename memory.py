"""The memory engine's API: remember, recall, build context, consolidate, decay, forget.

It composes the library parts (storage, keyword index, extraction, profile) and knows nothing about
Telegram. Writes to one scope are serialised by a per-scope lock; a transaction never spans an LLM call.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import prompts
from companion.config.settings import Settings
from companion.core.extraction import MergePlan, clean_keywords, parse_extraction, plan_merge
from companion.core.models import Memory, MemoryDraft, Profile, Recalled, Scope, Turn
from companion.core.text import normalize_text
from companion.core.timeutil import from_db, local_date, show, utcnow
from companion.engine.profile import ProfilePolicy, ProfileService, matching_traits
from companion.llm.client import LLMClient
from companion.recall.index import RecallFilter, ScopeIndex, mentions
from companion.recall.keywords import KeywordExtractor
from companion.recall.query import build_query
from companion.storage.sqlite import Storage

log = logging.getLogger(__name__)

INDEX_CACHE_SCOPES = 4096
MAX_TERMS = 64
# A long message often gets to the point at the end ("...对了，小王生日是哪天？"): read all of it.
MAX_QUERY_TERMS = 48


@dataclass(frozen=True, slots=True)
class EngineConfig:
    recall_max: int = 2
    recall_min_importance: float = 50.0
    recall_min_match: float = 0.45
    recall_cooldown_turns: int = 5
    extract_max_turns: int = 12
    tz: tzinfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))
    profile: ProfilePolicy = field(default_factory=ProfilePolicy)

    @classmethod
    def from_settings(cls, settings: Settings) -> EngineConfig:
        return cls(
            recall_max=settings.recall_max,
            recall_min_importance=settings.recall_min_importance,
            recall_min_match=settings.recall_min_match,
            recall_cooldown_turns=settings.recall_cooldown_turns,
            extract_max_turns=settings.extract_max_turns,
            tz=settings.tz,
            profile=ProfilePolicy(
                ttl=timedelta(hours=settings.profile_ttl_hours),
                min_refresh=timedelta(minutes=settings.profile_refresh_min_minutes),
                min_importance=settings.profile_min_importance,
            ),
        )


@dataclass(slots=True)
class MemoryContext:
    """What one reply call may know: the profile core, the dynamic traits this turn touches, and the
    recalled memories. Used for this call only; never written back or extracted from."""

    core: str = ""
    dynamic: list[str] = field(default_factory=list)
    recalled: list[Recalled] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Consolidation:
    turns: int
    inserted: int
    updated: int


@dataclass(frozen=True, slots=True)
class DecayReport:
    scopes: int
    decayed: int
    removed: int


class MemoryEngine:
    def __init__(
        self, storage: Storage, keywords: KeywordExtractor, config: EngineConfig, llm: LLMClient | None = None
    ) -> None:
        self.storage = storage
        self.keywords = keywords
        self.config = config
        self.llm = llm
        self.profiles = ProfileService(storage, llm, config.tz, config.profile)
        self._indexes: OrderedDict[Scope, ScopeIndex] = OrderedDict()
        self._locks: dict[Scope, asyncio.Lock] = {}
        self._data_version: int | None = None
        self._owns_store = False

    @classmethod
    async def create(
        cls, store: Storage, settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None
    ) -> MemoryEngine:
        """An engine on an open store; loads the keyword dictionaries off the event loop."""
        await asyncio.to_thread(keywords.load)
        keywords.add_words(settings.important_keywords)
        return cls(store, keywords, EngineConfig.from_settings(settings), llm)

    @classmethod
    async def open(
        cls, settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None
    ) -> MemoryEngine:
        """Open the SQLite store named by the settings and an engine that owns it (closed with it)."""
        store = await Storage.open(settings.db_path)
        try:
            engine = await cls.create(store, settings, keywords, llm)
        except BaseException:
            await store.close()
            raise
        engine._owns_store = True
        return engine

    async def close(self) -> None:
        if self._owns_store:
            await self.storage.close()

    # ---- scope state -----------------------------------------------------------------------------

    async def active_scopes(self) -> set[Scope]:
        """Scopes with companion mode on (the flag survives restarts)."""
        return await self.storage.active_scopes()

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        await self.storage.set_active(scope, active, now)
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
        return await self.storage.count_pending(scope)

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        return await self.storage.pending_turns(scope, limit)

    async def scopes_with_pending(self) -> list[Scope]:
        return await self.storage.scopes_with_pending()

    async def last_decay_at(self) -> datetime | None:
        stored = await self.storage.get_meta("last_decay_at")
        return None if stored is None else from_db(stored)

    async def profile(self, scope: Scope) -> Profile | None:
        """The current profile (cached or persisted), or None before the first build."""
        current = await self.profiles.current(scope)
        return current[0] if current else None

    def lock(self, scope: Scope) -> asyncio.Lock:
        """Serialises one scope's writes; other scopes never wait on it."""
        return self._locks.setdefault(scope, asyncio.Lock())

    # ---- remember / forget -----------------------------------------------------------------------

    async def remember(self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime) -> list[int]:
        """Store memories, merging a retold event into its existing row. Returns the ids of the rows
        written: new rows first, then rows a draft was merged into."""
        prepared = [self._prepare(d) for d in drafts]
        async with self.lock(scope):
            plan = await self._plan(scope, prepared, now)
            ids = await self.storage.apply_changes(scope, now, inserts=plan.inserts, updates=plan.updates)
            await self._reindex(scope, [*ids, *(m.id for m in plan.updates)])
        self.profiles.invalidate(scope)
        return [*ids, *(m.id for m in plan.updates)]

    async def _plan(self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime) -> MergePlan:
        """Dedup against only the rows that could match (shared keyword or event text), via the index."""
        index = await self._index(scope)
        candidates: dict[int, Memory] = {}
        for draft in drafts:
            candidates.update((m.id, m) for m in index.candidates(draft.event, draft.keywords))
        return plan_merge(list(candidates.values()), drafts, now)

    async def _reindex(self, scope: Scope, ids: Sequence[int]) -> None:
        index = self._indexes.get(scope)
        if index is not None:
            for memory in await self.storage.fetch_by_ids(scope, ids):
                index.add(memory)

    def _prepare(self, draft: MemoryDraft) -> MemoryDraft:
        draft.event = normalize_text(draft.event)
        draft.keywords = clean_keywords(draft.keywords) or self.keywords.keywords(draft.event, limit=8)
        draft.terms = self.keywords.keywords(draft.event, limit=MAX_TERMS)
        return draft

    async def forget(self, scope: Scope, ids: Iterable[int] | None = None) -> int:
        """Delete some memories, or all of a scope's when ``ids`` is None. Returns how many went."""
        async with self.lock(scope):
            stored = await self.storage.fetch_memories(scope)
            wanted = {m.id for m in stored} if ids is None else set(ids) & {m.id for m in stored}
            await self.storage.apply_changes(scope, utcnow(), deletes=sorted(wanted))
            if wanted:
                # The profile may quote what was just forgotten: withdraw it now, rebuild on the next turn.
                await self.storage.delete_profile(scope)
        self._invalidate(scope)
        return len(wanted)

    async def memories(self, scope: Scope) -> list[Memory]:
        return await self.storage.fetch_memories(scope)

    # ---- recall / context ------------------------------------------------------------------------

    async def recall(
        self, scope: Scope, text: str, now: datetime, *, turn: int = 0,
        cooldown: Mapping[int, int] | None = None, limit: int | bool | None = True,
        min_importance: float | None = None, keywords: Sequence[str] | None = None,
        earlier: Sequence[str] = (), reply: str | None = None, min_match: float | None = None,
    ) -> list[Recalled]:
        """Memories this text touches, best first. ``limit=True`` means the configured cap; ``None``
        lifts it (benchmarks), as ``min_importance=0`` lifts the floor, ``min_match=0`` the gate and
        ``cooldown=None`` the cooldown.
        ``earlier`` (the user's previous turns, oldest first) and ``reply`` (the companion's last reply)
        join the query at a lower weight: a turn often names its topic only before ("它" for the dog)."""
        words = self._query_words
        query = build_query(text, (lambda t: list(keywords)) if keywords is not None else words,
                            earlier=earlier, reply=reply)
        if not query:
            return []
        index = await self._index(scope)
        rules = RecallFilter(
            limit=self.config.recall_max if limit is True else (None if limit is None else int(limit)),
            min_importance=self.config.recall_min_importance if min_importance is None else min_importance,
            min_match=self.config.recall_min_match if min_match is None else min_match,
            cooldown_turns=self.config.recall_cooldown_turns,
            turn=turn,
            cooldown=cooldown,
        )
        return index.rank(query, now, rules)

    def _query_words(self, text: str) -> list[str]:
        return self.keywords.keywords(text, limit=MAX_QUERY_TERMS)

    async def build_context(
        self, scope: Scope, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int],
        allow_recall: bool = True, earlier: Sequence[str] = (), reply: str | None = None,
    ) -> MemoryContext:
        keywords = self._query_words(text)
        recalled = (
            await self.recall(scope, text, now, turn=turn, cooldown=cooldown, keywords=keywords,
                              earlier=earlier, reply=reply)
            if allow_recall else []
        )
        current = await self.profiles.current(scope)
        profile = current[0] if current else Profile(core="")
        return MemoryContext(
            core=profile.core, dynamic=matching_traits(profile, keywords), recalled=recalled, keywords=keywords
        )

    async def mark_mentioned(
        self, scope: Scope, reply: str, recalled: Sequence[Recalled], now: datetime
    ) -> list[int]:
        ids = [r.memory.id for r in recalled if mentions(reply, r.memory)]
        if ids:
            await self.storage.mark_mentioned(scope, ids, now)
            await self._reindex(scope, ids)
        return ids

    # ---- consolidation (extraction) --------------------------------------------------------------

    async def note_turn(self, scope: Scope, turn: Turn) -> None:
        """Queue a finished exchange for the next extraction; it stays queued until one succeeds."""
        await self.storage.add_turn(scope, turn)

    async def consolidate(self, scope: Scope, now: datetime) -> Consolidation:
        """Extract memories from the queued turns. Raises LLMError and keeps the turns queued on failure."""
        async with self.lock(scope):
            turns = await self.storage.pending_turns(scope, self.config.extract_max_turns)
            if not turns:
                return Consolidation(0, 0, 0)
            drafts = await self._extract(turns, now)
            prepared = [self._prepare(d) for d in drafts]
            plan = await self._plan(scope, prepared, now)
            up_to = max(t.id or 0 for t in turns)
            ids = await self.storage.consume_turns(scope, up_to, now, plan.inserts, plan.updates)
            await self._reindex(scope, [*ids, *(m.id for m in plan.updates)])
        self.profiles.invalidate(scope)
        log.info("extraction for %s: %d turns, %d new, %d updated",
                 scope.key, len(turns), len(plan.inserts), len(plan.updates))
        return Consolidation(len(turns), len(plan.inserts), len(plan.updates))

    async def _extract(self, turns: Sequence[Turn], now: datetime) -> list[MemoryDraft]:
        if self.llm is None:
            raise RuntimeError("consolidate needs an LLM client")
        today = local_date(now, self.config.tz)
        prompt = prompts.render("extract", today=today, turns=self._format_turns(turns))
        data = await self.llm.json([{"role": "user", "content": prompt}], purpose="extraction")
        return parse_extraction(data, self.keywords.keywords, today)

    def _format_turns(self, turns: Sequence[Turn]) -> str:
        lines: list[str] = []
        for turn in turns:
            lines.append(f"[{show(turn.at, self.config.tz)}] 用户：{turn.user}")
            if turn.reply:
                lines.append(f"聊天伙伴：{turn.reply}")
        return "\n".join(lines)

    # ---- profile ---------------------------------------------------------------------------------

    async def refresh_profile(self, scope: Scope, now: datetime, *, force: bool = False) -> Profile | None:
        """Rebuild the profile if due (or forced). On an LLM failure keep and return the last one."""
        if not force and not await self.profiles.due(scope, now):
            current = await self.profiles.current(scope)
            return current[0] if current else None
        async with self.lock(scope):
            return await self.profiles.rebuild(scope, now)

    # ---- decay -----------------------------------------------------------------------------------

    async def decay(self, now: datetime, batch: int = 200) -> DecayReport:
        """Daily decay and cleanup over every scope, in short transactions so chats are not held up."""
        scopes = await self.storage.scopes()
        decayed = removed = 0
        for start in range(0, len(scopes), batch):
            part = scopes[start : start + batch]
            d, r = await self.storage.decay_and_clean(part, now)
            decayed, removed = decayed + d, removed + r
            await asyncio.sleep(0)
        self._indexes.clear()
        for scope in scopes:
            self.profiles.invalidate(scope)
        return DecayReport(len(scopes), decayed, removed)

    # ---- index cache -----------------------------------------------------------------------------

    async def _index(self, scope: Scope) -> ScopeIndex:
        version = await self.storage.data_version()
        if version != self._data_version:
            # Another process (an operator's CLI) wrote: nothing cached can be trusted.
            self._indexes.clear()
            self._data_version = version
        index = self._indexes.get(scope)
        if index is None:
            index = ScopeIndex(await self.storage.fetch_memories(scope), self.keywords.keywords)
            self._indexes[scope] = index
            if len(self._indexes) > INDEX_CACHE_SCOPES:
                self._indexes.popitem(last=False)
        else:
            self._indexes.move_to_end(scope)
        return index

    def _invalidate(self, scope: Scope) -> None:
        self._indexes.pop(scope, None)
        self.profiles.invalidate(scope)
