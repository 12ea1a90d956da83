"""The memory engine's API: remember, recall, build context, consolidate, decay, forget.

It composes the library parts (storage, keyword index, extraction, profile) and knows nothing about
Telegram. Writes to one scope are serialised by a per-scope lock; a transaction never spans an LLM call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import prompts
from companion.config.settings import Settings
from companion.core import tiers
from companion.core.errors import LLMError, MemoryNotFoundError, NotYourMemoryError
from companion.core.extraction import (
    MergePlan,
    clean_keywords,
    fingerprint,
    parse_extraction,
    parse_today,
    plan_merge,
    tells,
)
from companion.core.models import (
    Memory,
    MemoryDraft,
    MemoryType,
    Origin,
    Profile,
    Recalled,
    Scope,
    ShortItem,
    ShortKind,
    Status,
    Tier,
    Turn,
    Validity,
)
from companion.core.text import normalize_text
from companion.core.timeutil import from_db, local_date, show, to_db, utcnow
from companion.engine.profile import ProfileService, matching_traits
from companion.engine.retrievers import DenseRetriever
from companion.engine.saving import guess_draft, parse_saved
from companion.engine.types import (
    Consolidation,
    DecayReport,
    EngineConfig,
    MemoryContext,
    MemoryStats,
    Provenance,
    ShortStats,
    ShortTerm,
    Standing,
)
from companion.llm.client import LLMClient
from companion.recall.filters import MemoryFilter, matches_words
from companion.recall.index import RecallFilter, ScopeIndex, mentions
from companion.recall.keywords import KeywordExtractor
from companion.recall.query import build_query
from companion.storage.base import ACTIVE_ONLY, EVERY_STATUS, MemoryStore
from companion.storage.sqlite import SQLiteStore

log = logging.getLogger(__name__)

__all__ = [
    "Consolidation",
    "DecayReport",
    "EngineConfig",
    "MemoryContext",
    "MemoryEngine",
    "MemoryStats",
    "Provenance",
    "ShortStats",
    "ShortTerm",
    "Standing",
]

INDEX_CACHE_SCOPES = 4096
MAX_TERMS = 64
# A long message often gets to the point at the end ("...对了，小王生日是哪天？"): read all of it.
MAX_QUERY_TERMS = 48
MAX_RELATED = 12  # stored memories shown to an extraction, to spot contradictions
MAX_INSTRUCTIONS = 5
MAX_RECENT = 3
RECENT_WINDOW = timedelta(days=1)
SHORT_TURNS_KEPT = 200
LAST_EXTRACTION = "last_extraction"
TODAY_EVENTS_KEPT = 30


class MemoryEngine:
    def __init__(
        self, store: MemoryStore, keywords: KeywordExtractor, config: EngineConfig, llm: LLMClient | None = None,
        dense: DenseRetriever | None = None,
    ) -> None:
        self._store = store
        self.dense = dense  # semantic recall, when an embedding backend is configured
        self.keywords = keywords
        self.config = config
        self.llm = llm
        self.profiles = ProfileService(store, llm, config.tz, config.profile)
        self._indexes: OrderedDict[Scope, ScopeIndex] = OrderedDict()
        self._locks: dict[Scope, asyncio.Lock] = {}
        self._data_version: int | None = None
        self._owns_store = False
        # Fingerprints of what each scope asked to forget, so extraction does not learn it again.
        self._forgotten_prints: dict[Scope, set[str]] = {}
        self._standing_cache: dict[Scope, tuple[set[int], list[str], list[Memory]]] = {}

    @classmethod
    async def create(
        cls, store: MemoryStore, settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None
    ) -> MemoryEngine:
        """An engine on an open store; loads the keyword dictionaries off the event loop."""
        await asyncio.to_thread(keywords.load)
        keywords.add_words(settings.important_keywords)
        dense = await DenseRetriever.from_settings(store, settings)
        return cls(store, keywords, EngineConfig.from_settings(settings), llm, dense)

    @classmethod
    async def open(
        cls, settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None
    ) -> MemoryEngine:
        """Open the SQLite store named by the settings and an engine that owns it (closed with it)."""
        store = await SQLiteStore.open(settings.db_path)
        try:
            engine = await cls.create(store, settings, keywords, llm)
        except BaseException:
            await store.close()
            raise
        engine._owns_store = True
        return engine

    async def close(self) -> None:
        if self.dense is not None:
            await self.dense.close()
        if self._owns_store:
            await self._store.close()

    # ---- scope state -----------------------------------------------------------------------------

    async def active_scopes(self) -> set[Scope]:
        """Scopes with companion mode on (the flag survives restarts)."""
        return await self._store.active_scopes()

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
        stored = await self._store.get_meta("last_decay_at")
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
            ids = await self._store.apply_changes(scope, now, inserts=plan.inserts, updates=plan.updates)
            await self._supersede(scope, plan.inserts, ids, now)
            await self._reindex(scope, [*ids, *(m.id for m in plan.updates)])
            evicted = await self._enforce_capacity(scope, now)
        self.profiles.invalidate(scope)
        if evicted:
            log.info("capacity: %d memories of %s evicted", evicted, scope.key)
        await self._embed(scope, now)
        return [*ids, *(m.id for m in plan.updates)]

    async def _plan(self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime) -> MergePlan:
        """Dedup each draft against only the rows that could match it (same event text or two shared
        keywords, from the index): a batch checked against the union of every draft's candidates cost
        drafts x union comparisons, seconds for a big batch of a big user."""
        index = await self._index(scope)
        return plan_merge((), drafts, now, near=lambda draft: index.candidates(draft.event, draft.keywords))

    async def _reindex(self, scope: Scope, ids: Sequence[int]) -> None:
        self._standing_cache.pop(scope, None)
        index = self._indexes.get(scope)
        if index is not None:
            for memory in await self._store.fetch_by_ids(scope, ids):
                index.add(memory)

    async def _embed(self, scope: Scope, now: datetime) -> None:
        # After the lock: an embedding call never holds up the scope's other writes.
        if self.dense is not None:
            await self.dense.sync(scope, now)

    def _prepare(self, draft: MemoryDraft) -> MemoryDraft:
        draft.event = normalize_text(draft.event)
        draft.keywords = clean_keywords(draft.keywords) or self.keywords.keywords(draft.event, limit=8)
        draft.terms = self.keywords.keywords(draft.event, limit=MAX_TERMS)
        return draft

    async def forget(self, scope: Scope, ids: Iterable[int] | None = None, *, reason: str = "user") -> int:
        """Forget some memories, or all of a scope's when ``ids`` is None; returns how many went."""
        return len(await self.forget_memories(scope, ids, reason=reason))

    async def forget_memories(
        self, scope: Scope, ids: Iterable[int] | None = None, *, reason: str = "user"
    ) -> list[Memory]:
        """Forget and return what was forgotten (as it was, so the chat layer can scrub its short-term
        context). The text goes at once, everywhere: table, index, profile, and the queued turns that told
        it (so a later extraction cannot bring it back); a content-free tombstone stays."""
        async with self.lock(scope):
            stored = await self._store.fetch_memories(scope, EVERY_STATUS - {Status.FORGOTTEN})
            wanted = [m for m in stored if ids is None or m.id in set(ids)]
            await self._store.apply_changes(scope, utcnow(), forget=[m.id for m in wanted], reason=reason)
            if wanted:
                # The profile may quote what was just forgotten: withdraw it now, rebuild on the next turn.
                await self._store.delete_profile(scope)
                if reason == "user":
                    await self._drop_telling_turns(scope, wanted)
                    await self._drop_telling_short(scope, wanted)
        self._invalidate(scope)
        if wanted and self.dense is not None:
            await self.dense.prune(scope)  # the forgotten memories' vectors
        return wanted

    async def _drop_telling_short(self, scope: Scope, forgotten: Sequence[Memory]) -> None:
        telling = [
            item.id for kind, keep in ((ShortKind.TURN, SHORT_TURNS_KEPT), (ShortKind.EVENT, TODAY_EVENTS_KEPT))
            for item in await self._store.short_items(scope, kind, keep)
            if any(tells(item.user, m) or (item.reply and tells(item.reply, m)) for m in forgotten)
        ]
        if telling:
            await self._store.drop_short(scope, telling)

    async def _drop_telling_turns(self, scope: Scope, forgotten: Sequence[Memory]) -> None:
        turns = await self._store.pending_turns(scope, 10_000)
        telling = [t.id for t in turns if t.id is not None and any(tells(t.user, m) for m in forgotten)]
        await self._store.drop_turns(scope, telling)

    async def memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        """The scope's memories in these statuses (active by default), oldest first."""
        return await self._store.fetch_memories(scope, statuses)

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
        given = {text: list(keywords)} if keywords is not None else {}
        # Given keywords stand for the current turn only; earlier turns and the reply are segmented here.
        query = build_query(text, lambda t: given[t] if t in given else words(t), earlier=earlier, reply=reply)
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
        ranked = index.rank(query, now, rules if self.dense is None else self.dense.widen(rules))
        return ranked if self.dense is None else await self.dense.fuse(scope, text, now, rules, ranked)

    def _query_words(self, text: str) -> list[str]:
        return self.keywords.keywords(text, limit=MAX_QUERY_TERMS)

    async def build_context(
        self, scope: Scope, text: str, now: datetime, *, turn: int, cooldown: Mapping[int, int],
        allow_recall: bool = True, earlier: Sequence[str] = (), reply: str | None = None,
    ) -> MemoryContext:
        keywords = self._query_words(text)
        recalled = (
            await self.recall(scope, text, now, turn=turn, cooldown=cooldown, keywords=keywords, limit=None,
                              earlier=earlier, reply=reply)
            if allow_recall else []
        )
        standing = await self._standing(scope, now)
        # Tiers decide what may be recalled at all (long-term memories reach the reply through the profile).
        recalled = [r for r in recalled if r.memory.id in standing.recallable][: self.config.recall_max]
        if recalled:
            await self._store.touch(scope, [r.memory.id for r in recalled], now)
        current = await self.profiles.current(scope)
        profile = current[0] if current else Profile(core="")
        return MemoryContext(
            core=profile.core, dynamic=matching_traits(profile, keywords), recalled=recalled, keywords=keywords,
            instructions=standing.instructions, recent=standing.recent, today=await self.today_events(scope, now),
        )

    async def _standing(self, scope: Scope, now: datetime) -> Standing:
        """Per reply: which memories may be recalled (by tier), the instructions that always apply, and
        core facts learned in the last day that the profile may not carry yet."""
        cached = self._standing_cache.get(scope)
        if cached is None:
            # From the cached index, not the database: a user with 10,000 memories must not pay a full
            # read per turn. Dropped whenever the index changes (``_reindex``, ``_drop_from_index``).
            active = list((await self._index(scope)).memories.values())
            _, recallable, instructions = tiers.reply_candidates(active)
            newest = sorted((m for m in active if m.type in (MemoryType.FACT, MemoryType.PREFERENCE)
                             and m.tier is not Tier.SHORT), key=lambda m: m.created_at, reverse=True)
            cached = self._standing_cache[scope] = (
                {m.id for m in recallable}, [m.event for m in instructions][:MAX_INSTRUCTIONS], newest[:MAX_RECENT]
            )
        recallable_ids, rules, newest = cached
        recent = [m.event for m in newest if now - m.created_at <= RECENT_WINDOW]
        return Standing(recallable_ids, rules, recent)

    async def mark_mentioned(
        self, scope: Scope, reply: str, recalled: Sequence[Recalled], now: datetime
    ) -> list[int]:
        ids = [r.memory.id for r in recalled if mentions(reply, r.memory)]
        if ids:
            await self._store.mark_mentioned(scope, ids, now)
            await self._reindex(scope, ids)
        return ids

    # ---- consolidation (extraction) --------------------------------------------------------------

    async def note_turn(self, scope: Scope, turn: Turn) -> None:
        """Queue a finished exchange for the next extraction; it stays queued until one succeeds."""
        await self._store.add_turn(scope, turn)

    async def consolidate(self, scope: Scope, now: datetime) -> Consolidation:
        """Extract memories from the queued turns. Raises LLMError and keeps the turns queued on failure."""
        async with self.lock(scope):
            turns = await self._store.pending_turns(scope, self.config.extract_max_turns)
            if not turns:
                return Consolidation(0, 0, 0)
            known = await self._related(scope, turns)
            drafts, today_events = await self._extract(turns, known, now)
            for event in today_events:
                await self._store.add_short(scope, ShortKind.EVENT, event, None, turns[-1].at, keep=TODAY_EVENTS_KEPT)
            for draft in drafts:
                draft.tier = Tier.SHORT  # extracted memories start short-term; the user promotes them
                draft.source_at = turns[-1].at
                draft.source_chat_id, draft.source_message_id = turns[-1].chat_id, turns[-1].message_id
                if draft.supersedes not in known:
                    draft.supersedes = None  # only a memory the model was shown, so only this scope's
            prepared = [self._prepare(d) for d in drafts if not await self._was_forgotten(scope, d)]
            plan = await self._plan(scope, prepared, now)
            up_to = max(t.id or 0 for t in turns)
            ids = await self._store.consume_turns(scope, up_to, now, plan.inserts, plan.updates)
            await self._supersede(scope, plan.inserts, ids, now)
            await self._reindex(scope, [*ids, *(m.id for m in plan.updates)])
            evicted = await self._enforce_capacity(scope, now)
        self.profiles.invalidate(scope)
        await self.set_note(scope, LAST_EXTRACTION, to_db(now))
        if evicted:
            log.info("capacity: %d memories of %s evicted", evicted, scope.key)
        await self._embed(scope, now)
        log.info("extraction for %s: %d turns, %d new, %d updated",
                 scope.key, len(turns), len(plan.inserts), len(plan.updates))
        return Consolidation(len(turns), len(plan.inserts), len(plan.updates))

    async def _extract(
        self, turns: Sequence[Turn], known: Mapping[int, Memory], now: datetime
    ) -> tuple[list[MemoryDraft], list[str]]:
        if self.llm is None:
            raise RuntimeError("consolidate needs an LLM client")
        today = local_date(now, self.config.tz)
        listed = "\n".join(f"[{mid}] {m.event}" for mid, m in known.items()) or "（无）"
        prompt = prompts.render("extract", today=today, known=listed, turns=self._format_turns(turns))
        data = await self.llm.json([{"role": "user", "content": prompt}], purpose="extraction")
        return parse_extraction(data, self.keywords.keywords, today), parse_today(data)

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
        scopes = await self._store.scopes()
        decayed = removed = 0
        for start in range(0, len(scopes), batch):
            part = scopes[start : start + batch]
            d, r = await self._store.decay_and_clean(part, now)
            decayed, removed = decayed + d, removed + r
            await asyncio.sleep(0)
        # Recorded once every scope is done: a run cut short is simply run again (whole days since each
        # row's own anchor, so nothing decays twice).
        await self._store.set_meta("last_decay_at", to_db(now))
        if self.dense is not None:
            await self.dense.prune()  # cleanup tombstoned rows in SQL; their vectors go too
        self._indexes.clear()
        self._standing_cache.clear()
        for scope in scopes:
            self.profiles.invalidate(scope)
        return DecayReport(len(scopes), decayed, removed)

    # ---- index cache -----------------------------------------------------------------------------

    async def _index(self, scope: Scope) -> ScopeIndex:
        version = await self._store.data_version()
        if version != self._data_version:
            # Another process (an operator's CLI) wrote: nothing cached can be trusted.
            self._indexes.clear()
            self._standing_cache.clear()
            self._data_version = version
        index = self._indexes.get(scope)
        if index is None:
            index = ScopeIndex(await self._store.fetch_memories(scope), self.keywords.keywords)
            self._indexes[scope] = index
            if len(self._indexes) > INDEX_CACHE_SCOPES:
                evicted, _ = self._indexes.popitem(last=False)
                self._standing_cache.pop(evicted, None)
        else:
            self._indexes.move_to_end(scope)
        return index

    def _invalidate(self, scope: Scope) -> None:
        self._indexes.pop(scope, None)
        self._standing_cache.pop(scope, None)
        self._forgotten_prints.pop(scope, None)
        self.profiles.invalidate(scope)

    # ---- life cycle: contradictions, capacity -----------------------------------------------------

    async def _related(self, scope: Scope, turns: Sequence[Turn]) -> dict[int, Memory]:
        """Stored memories the turns may contradict, shown to the extraction with their handles."""
        text = " ".join(t.user for t in turns)
        touched = await self.recall(scope, text, utcnow(), limit=MAX_RELATED, min_importance=0, cooldown=None)
        found = {r.memory.id: r.memory for r in touched}
        # Names, standing instructions and core facts are what news most often replaces, even in other words.
        for memory in await self._store.fetch_memories(scope):
            if len(found) >= MAX_RELATED:
                break
            if memory.type is MemoryType.INSTRUCTION or memory.tier is Tier.LONG:
                found.setdefault(memory.id, memory)
        return found

    async def _was_forgotten(self, scope: Scope, draft: MemoryDraft) -> bool:
        """A draft whose words equal a memory the user asked to forget is not learned again."""
        if scope not in self._forgotten_prints:
            stones = await self._store.fetch_memories(scope, {Status.FORGOTTEN})
            self._forgotten_prints[scope] = {m.fingerprint for m in stones if m.status_reason == "user"}
        return fingerprint(draft.event) in self._forgotten_prints[scope]

    async def _supersede(self, scope: Scope, drafts: Sequence[MemoryDraft], ids: Sequence[int], now: datetime) -> None:
        """New information that replaces old: the old memory stays, linked to the new one, never recalled."""
        pairs = {d.supersedes: new for d, new in zip(drafts, ids, strict=True) if d.supersedes is not None}
        if not pairs:
            return
        old = await self._store.fetch_by_ids(scope, list(pairs))
        updates = [replace(m, status=Status.SUPERSEDED, superseded_by=pairs[m.id], status_reason="replaced",
                           updated_at=now) for m in old if m.is_active]
        if updates:
            await self._store.apply_changes(scope, now, updates=updates)
            for m in updates:
                self._drop_from_index(scope, m.id)

    async def _enforce_capacity(self, scope: Scope, now: datetime) -> int:
        victims = tiers.to_evict(await self._store.fetch_memories(scope), self.config.capacity, now)
        if victims:
            await self._store.apply_changes(scope, now, forget=[m.id for m in victims], reason="evicted")
            for m in victims:
                self._drop_from_index(scope, m.id)
        return len(victims)

    def _drop_from_index(self, scope: Scope, handle: int) -> None:
        self._standing_cache.pop(scope, None)
        index = self._indexes.get(scope)
        if index is not None:
            index.remove(handle)

    # ---- the user steers: save, edit, move, archive, search, why, reviews, stats ------------------

    async def save_explicit(
        self, scope: Scope, text: str, now: datetime, *, origin: Origin = Origin.EXPLICIT,
        source_chat_id: int | None = None, source_message_id: int | None = None,
    ) -> Memory:
        """Remember what the user asked to remember, at once, in the tier the model judges (a lasting
        core preference long-term, important information medium-term, the rest short-term). Works
        without the model: the words are kept as they are."""
        draft = await self._judge(text, now)
        draft.origin, draft.source_at = origin, now
        draft.source_chat_id, draft.source_message_id = source_chat_id, source_message_id
        return await self.save_draft(scope, draft, now)

    async def save_draft(self, scope: Scope, draft: MemoryDraft, now: datetime) -> Memory:
        """Store one memory already judged (by the user's words, a model's tool call or an operator) and
        return it; a retold memory merges into its row, which rises to the draft's tier if that is higher."""
        [handle, *_] = await self.remember(scope, [draft], now)
        memory = await self.get(scope, handle)
        if draft.tier is not None and tiers.ORDER.index(memory.tier) < tiers.ORDER.index(draft.tier):
            memory = await self._write(scope, tiers.move_to_tier(memory, draft.tier, now))
        return memory

    async def _judge(self, text: str, now: datetime) -> MemoryDraft:
        if self.llm is None:
            return guess_draft(text, self.keywords.keywords)
        prompt = prompts.render("save", today=local_date(now, self.config.tz), text=text)
        try:
            data = await self.llm.json([{"role": "user", "content": prompt}], purpose="save")
        except LLMError as exc:
            log.warning("save without the model's judgement: %s", exc)
            return guess_draft(text, self.keywords.keywords)
        return parse_saved(data, text, self.keywords.keywords)

    async def _write(self, scope: Scope, memory: Memory) -> Memory:
        async with self.lock(scope):
            await self._store.apply_changes(scope, memory.updated_at, updates=[memory])
            self._drop_from_index(scope, memory.id)
            if memory.is_active:
                await self._reindex(scope, [memory.id])
        self.profiles.invalidate(scope)
        await self._embed(scope, memory.updated_at)  # an edit changes what the vector must say
        return memory

    async def edit(
        self, scope: Scope, handle: int, text: str | None, now: datetime, *, importance: float | None = None
    ) -> Memory:
        """New wording for one memory (keywords and index terms follow) and/or a new importance."""
        memory = await self.get(scope, handle)
        if importance is not None:
            memory = replace(memory, importance=min(max(float(importance), 0.0), 100.0), updated_at=now)
        if text is None:
            return await self._write(scope, replace(memory, updated_at=now))
        draft = self._prepare(MemoryDraft(event=text, keywords=[], importance=memory.importance))
        return await self._write(scope, replace(memory, event=draft.event, keywords=draft.keywords,
                                                terms=draft.terms, updated_at=now))

    async def move(self, scope: Scope, handle: int, tier: Tier, now: datetime) -> Memory:
        return await self._write(scope, tiers.move_to_tier(await self.get(scope, handle), tier, now))

    async def promote(self, scope: Scope, handle: int, now: datetime) -> Memory:
        memory = await self.get(scope, handle)
        moved = tiers.move_to_tier(memory, tiers.next_tier(memory.tier), now)
        return await self._write(scope, replace(moved, status_reason="promoted"))  # the weekly summary counts it

    async def keep(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Keep as it is and ask again after one more period of its tier."""
        return await self._write(scope, tiers.keep_for_another_period(await self.get(scope, handle), now))

    async def archive(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Put away: never recalled, kept in backups, restorable from /memories."""
        memory = await self.get(scope, handle)
        return await self._write(scope, replace(memory, status=Status.ARCHIVED, status_reason="user", updated_at=now))

    async def restore(self, scope: Scope, handle: int, now: datetime) -> Memory:
        """Bring an archived memory back (its review restarts in its tier)."""
        memory = await self.get(scope, handle)
        if memory.status is not Status.ARCHIVED:
            return memory
        back = replace(memory, status=Status.ACTIVE, status_reason="")
        return await self._write(scope, tiers.keep_for_another_period(back, now))

    async def set_review(self, scope: Scope, handle: int, when: datetime) -> Memory:
        """Put a review time back (undoing a "keep")."""
        return await self._write(scope, replace(await self.get(scope, handle), review_at=when))

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        """Record that these memories were shown (a list): their last access time moves."""
        await self._store.touch(scope, ids, now)

    async def pin(self, scope: Scope, handle: int, pinned: bool, now: datetime) -> Memory:
        return await self._write(scope, replace(await self.get(scope, handle), pinned=pinned, updated_at=now))

    async def search(
        self, scope: Scope, query: str, now: datetime, *, statuses: Collection[Status] = ACTIVE_ONLY,
        tiers_: Collection[Tier] | None = None, types: Collection[MemoryType] | None = None,
        since: datetime | None = None, until: datetime | None = None, origins: Collection[Origin] | None = None,
        limit: int = 20,
    ) -> list[Memory]:
        """search_memories: memories matching a query (every word, or the text itself), newest first, then
        those close in meaning (when semantic recall is on); an empty query lists them all. Filters: status,
        tier, type, origin, learned in [since, until). Counts as an access."""
        words = [w for w in normalize_text(query).lower().split() if w]
        filters = MemoryFilter.of(types=types or (), tiers=tiers_ or (), origins=origins or (), since=since,
                                  until=until)
        found = [m for m in await self._store.fetch_memories(scope, statuses)
                 if filters.admits(m) and matches_words(m, words)]
        found.sort(key=lambda m: (m.created_at, m.id), reverse=True)
        if words and self.dense is not None and len(found) < limit:
            found += await self.dense.similar(scope, query, filters, statuses, limit, exclude={m.id for m in found})
        if words and not found:
            found = [r.memory for r in await self.recall(scope, query, now, limit=limit, min_importance=0)
                     if r.memory.status in statuses and filters.admits(r.memory)]
            found.sort(key=lambda m: (m.created_at, m.id), reverse=True)
        found = found[:limit]
        await self._store.touch(scope, [m.id for m in found if m.is_active], now)
        return found

    async def why(self, scope: Scope, handle: int) -> Provenance:
        """Where a memory came from and how it changed: its source, and the memories it replaced."""
        memory = await self.get(scope, handle)
        everything = await self._store.fetch_memories(scope, EVERY_STATUS)
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
            gone = await self.forget_memories(scope, [handle])
            return gone[0] if gone else memory
        return await self.keep(scope, handle, now)

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
            evicted_this_week=sum(m.status_reason == "evicted" and m.updated_at >= week_ago for m in everything),
            pending_turns=await self._store.count_pending(scope),
        )

    # ---- small per-scope notes (review bookkeeping, opt-ins) --------------------------------------

    async def note(self, scope: Scope, name: str) -> str | None:
        return await self._store.get_meta(f"{name}:{scope.key}")

    async def set_note(self, scope: Scope, name: str, value: str) -> None:
        await self._store.set_meta(f"{name}:{scope.key}", value)

    # ---- conversation summaries --------------------------------------------------------------------

    async def summarise(self, scope: Scope, turns: Sequence[Turn], now: datetime) -> Memory | None:
        """A short-term memory summing up a conversation that had something worth keeping, or None.
        Raises LLMError when the model cannot answer."""
        if self.llm is None or not turns:
            return None
        prompt = prompts.render("summary", today=local_date(now, self.config.tz), turns=self._format_turns(turns))
        data = await self.llm.json([{"role": "user", "content": prompt}], purpose="summary")
        summary = data.get("summary")
        if not isinstance(summary, str) or not normalize_text(summary):
            return None
        draft = MemoryDraft(event=f"{local_date(now, self.config.tz)} {normalize_text(summary)[:50]}",
                            keywords=clean_keywords(data.get("keywords")), importance=40.0,
                            validity=Validity.DAYS_7, tier=Tier.SHORT, source_at=now)
        [handle, *_] = await self.remember(scope, [draft], now)
        return await self.get(scope, handle)

    # ---- short-term memory: kept in the database, so a restart forgets nothing -------------------

    async def record_turn(self, scope: Scope, user: str, reply: str | None, at: datetime, *, recalled: bool) -> None:
        """Keep a finished exchange as short-term memory (the newest 200 stay)."""
        await self._store.add_short(scope, ShortKind.TURN, user, reply, at, keep=SHORT_TURNS_KEPT, recalled=recalled)

    async def recent_turns(self, scope: Scope, limit: int) -> list[ShortItem]:
        return await self._store.short_items(scope, ShortKind.TURN, limit)

    async def today_events(self, scope: Scope, now: datetime) -> list[str]:
        """What the user reported today (local day), oldest first."""
        today = local_date(now, self.config.tz)
        items = await self._store.short_items(scope, ShortKind.EVENT, TODAY_EVENTS_KEPT)
        return [i.user for i in items if local_date(i.at, self.config.tz) == today]

    async def clear_short_term(self, scope: Scope, kind: ShortKind | None = None) -> None:
        await self._store.drop_short(scope, kind=kind)

    async def short_term(self, scope: Scope, now: datetime, turns: int = 10) -> ShortTerm:
        """The reply call's short-term half: the last turns and today's events."""
        return ShortTerm(await self.recent_turns(scope, turns), await self.today_events(scope, now))

    async def short_stats(self, scope: Scope) -> ShortStats:
        """Counts per kind, the share of kept turns that carried a recalled memory, the last extraction."""
        turns = await self._store.short_items(scope, ShortKind.TURN, SHORT_TURNS_KEPT)
        events = await self._store.short_items(scope, ShortKind.EVENT, TODAY_EVENTS_KEPT)
        last = await self.note(scope, LAST_EXTRACTION)
        return ShortStats(len(turns), len(events), sum(t.recalled for t in turns) / len(turns) if turns else 0.0,
                          None if last is None else from_db(last))

    # ---- a group chat that changed its id (upgraded to a supergroup) -----------------------------

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """Move every (old chat, user) scope to (new chat, user) and drop what was cached for either side.
        The old scopes' locks are held meanwhile, so an extraction already running finishes first and its
        memories move too. Returns the old scopes moved (none when already moved)."""
        olds = sorted((s for s in await self._store.scopes() if s.chat_id == old_chat_id), key=lambda s: s.key)
        async with contextlib.AsyncExitStack() as held:
            for old in olds:
                await held.enter_async_context(self.lock(old))
            moved = await self._store.move_chat(old_chat_id, new_chat_id, now)
        for old in moved:
            self._invalidate(old)
            self._invalidate(Scope(old.user_id, new_chat_id))
        return moved
