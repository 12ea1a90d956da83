"""The engine's in-process caches: each scope's recall index and its standing candidates.

Bounded by the number of memories held, not the number of scopes: one user with 10,000 memories weighs
as much as a hundred typical users, so a count of scopes says nothing about the memory the cache takes.
A cached scope follows its change counter (``ChangeJournal``): when the counter moved, whoever wrote
(this process, another one: an operator's CLI), the journal says which memories changed and only those
are read again; a scope-wide change (decay, a chat move) or a long gap drops the scope's index. A forget
of this process drops it at once (``IndexCache.follow``, a follower of the change feed).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from companion.core import tiers
from companion.core.changes import SCOPE_WIDE
from companion.core.models import Memory, MemoryType, Scope, Tier, Validity
from companion.engine.following import News
from companion.engine.values import Standing
from companion.recall.index import ScopeIndex, Tokenize
from companion.storage.base import MemoryStore

# What one cached memory costs (its Memory object, word and character postings), measured with
# tracemalloc on the scale bench's users: 4.0 KB per memory at 100 memories a user, 4.2 KB at 1,835
# (units and words interned, postings as lists; 8.5 and 8.2 KB before). Counted as 4.5 KB, for the small
# users' fixed part. The budget is set in MB (``INDEX_CACHE_MB``) and counted in memories.
BYTES_PER_MEMORY = 4608
DEFAULT_CACHE_MEMORIES = 48 * 2**20 // BYTES_PER_MEMORY
MAX_INSTRUCTIONS = 5
RECENT_WINDOW = timedelta(days=1)
# More changes than this since a scope's index was current: rebuilding it costs less than applying them.
MAX_SYNC_CHANGES = 200


@dataclass(frozen=True, slots=True)
class _Candidates:
    instructions: list[str]
    newest: list[Memory]


def memories_for(megabytes: int) -> int:
    """How many memories an index budget of this many MB holds."""
    return megabytes * 2**20 // BYTES_PER_MEMORY


class IndexCache:
    """Least recently used scope indexes up to a total number of memories (the scope being read always
    stays, however big), plus the per-reply standing candidates derived from each index."""

    def __init__(
        self, store: MemoryStore, tokenize: Tokenize, max_memories: int = DEFAULT_CACHE_MEMORIES,
    ) -> None:
        self._store = store
        self._tokenize = tokenize
        self.max_memories = max_memories
        self._indexes: OrderedDict[Scope, ScopeIndex] = OrderedDict()
        self._sizes: dict[Scope, int] = {}
        self._held = 0
        self._standing: dict[Scope, _Candidates] = {}
        self._seen: dict[Scope, int] = {}  # the change counter each cached index is current at

    @property
    def held(self) -> int:
        """Memories held in cached indexes."""
        return self._held

    @property
    def scopes(self) -> int:
        return len(self._indexes)

    async def _sync(self, scope: Scope, also: Sequence[int] = (), counter: int | None = None) -> None:
        """Bring a loaded index up to the scope's change counter (``counter`` when the caller read it), and
        read ``also`` again (memories whose access or mention counts changed: the journal does not record
        those)."""
        index = self._indexes.get(scope)
        if index is None:
            return
        if counter is None:
            counter = await self._store.change_counter(scope)
        seen = self._seen.get(scope, 0)
        handles = set(also)
        if counter != seen:
            changes = await self._store.changes_since(scope, seen, MAX_SYNC_CHANGES)
            if len(changes) >= MAX_SYNC_CHANGES or any(c.op in SCOPE_WIDE for c in changes):
                self.invalidate(scope)
                return
            handles.update(c.handle for c in changes if c.handle is not None)  # EVENTS: not a memory
            self._seen[scope] = max([counter, *(c.seq for c in changes)])
        if not handles:
            return
        self._standing.pop(scope, None)
        for handle in handles:
            index.remove(handle)
        for memory in await self._store.fetch_by_ids(scope, sorted(handles)):
            if memory.is_active:
                index.add(memory)
        self._recount(scope, index)

    async def refresh(self, scope: Scope) -> None:
        """Bring a loaded index up to the scope's change counter (before a plan is made from it)."""
        await self._sync(scope)

    async def observe(self, scope: Scope, counter: int) -> None:
        """The scope's change counter, read with a turn's context (``turn_context``): a loaded index costs
        no store call when nothing changed."""
        await self._sync(scope, counter=counter)

    async def index(self, scope: Scope) -> ScopeIndex:
        """The scope's index, brought up to its change counter first (one counter read when loaded)."""
        index = self._indexes.get(scope)
        if index is not None:
            await self._sync(scope)
        return await self.observed(scope)

    async def observed(self, scope: Scope) -> ScopeIndex:
        """The scope's index as the last ``observe`` or ``load`` left it: no store call while it stays
        loaded (a turn's read brought it up to date); loaded from the store when it is not."""
        index = self._indexes.get(scope)  # dropped by a sync when too much changed
        if index is not None:
            self._indexes.move_to_end(scope)
            return index
        # The counter is read first: a change committed while the rows load is applied once more later.
        seen = await self._store.change_counter(scope)
        return self.load(scope, await self._store.fetch_memories(scope), seen)

    def load(self, scope: Scope, memories: Sequence[Memory], counter: int) -> ScopeIndex:
        """The scope's index built from its active memories, read by the caller at this change counter."""
        index = ScopeIndex(list(memories), self._tokenize)
        self._indexes[scope] = index
        self._seen[scope] = counter
        self._recount(scope, index)
        return index

    def _recount(self, scope: Scope, index: ScopeIndex) -> None:
        """Count the scope's memories now and drop the least recently used others beyond the budget."""
        self._held += len(index.memories) - self._sizes.get(scope, 0)
        self._sizes[scope] = len(index.memories)
        while self._held > self.max_memories and len(self._indexes) > 1:
            oldest = next(iter(self._indexes))
            if oldest == scope:
                break
            self.invalidate(oldest)

    def cached(self, scope: Scope) -> ScopeIndex | None:
        """The scope's index if it is loaded (writes keep a loaded index current; they never load one)."""
        return self._indexes.get(scope)

    async def add(self, scope: Scope, ids: Sequence[int]) -> None:
        """Memories were written or changed: a loaded index takes them, and whatever else the journal says
        changed, as stored now."""
        self._standing.pop(scope, None)
        await self._sync(scope, ids)

    def mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        """A reply mentioned these memories, shown to it (an access each): a loaded index takes the counts
        the store just wrote, without reading them back."""
        index = self._indexes.get(scope)
        if index is None or not ids:
            return
        self._standing.pop(scope, None)
        for memory in [index.memories[i] for i in ids if i in index.memories]:
            index.add(replace(memory, last_mentioned_at=now, mention_count=memory.mention_count + 1,
                              last_accessed_at=now, access_count=memory.access_count + 1))

    def remove(self, scope: Scope, handle: int) -> None:
        self._standing.pop(scope, None)
        index = self._indexes.get(scope)
        if index is not None:
            index.remove(handle)
            self._recount(scope, index)

    def invalidate(self, scope: Scope) -> None:
        self._indexes.pop(scope, None)
        self._held -= self._sizes.pop(scope, 0)
        self._standing.pop(scope, None)
        self._seen.pop(scope, None)

    async def follow(self, news: News) -> None:
        """A follower of the change feed (``following``): this process's forget drops the scope's index, as it
        stands, at once (a write's plan reads a loaded index without bringing it up to date first). Entries
        of other processes are the index's own to read, at its next look at the change counter (``_sync``)."""
        if news.forgetting is not None:
            self.invalidate(news.scope)

    def clear(self) -> None:
        self._indexes.clear()
        self._sizes.clear()
        self._held = 0
        self._standing.clear()
        self._seen.clear()

    async def standing(self, scope: Scope, now: datetime) -> Standing:
        """``standing_of`` the scope's index brought up to date."""
        return self.standing_of(scope, await self.index(scope), now)

    def standing_of(self, scope: Scope, index: ScopeIndex, now: datetime) -> Standing:
        """Per reply: the instructions that always apply, the core facts learned in the last day, and the
        newest lasting facts (for what the profile may not carry yet), from the scope's current ``index``.
        Recall is not limited here: every active memory may be recalled."""
        cached = self._standing.get(scope)
        if cached is None:
            # From the cached index, not the database: a user with 10,000 memories must not pay a full
            # read per turn. Dropped whenever the index changes.
            active = list(index.memories.values())
            instructions = tiers.instructions(active)
            newest = sorted((m for m in active if m.is_active and is_core(m)), key=lambda m: m.created_at, reverse=True)
            # No cap: every lasting fact the profile does not carry yet must stay in view (the context keeps
            # that view within its budget by having the profile rebuilt, ``ProfileService.overflow``).
            cached = self._standing[scope] = _Candidates([m.event for m in instructions][:MAX_INSTRUCTIONS], newest)
        recent = [m.event for m in cached.newest if now - m.created_at <= RECENT_WINDOW]
        return Standing(cached.instructions, recent, list(cached.newest))


def is_core(memory: Memory) -> bool:
    """A fact or preference that lasts: kept past the short-term tier, or judged permanent."""
    return memory.type in (MemoryType.FACT, MemoryType.PREFERENCE) and (
        memory.tier is not Tier.SHORT or memory.validity is Validity.PERMANENT)
