"""The engine's in-process caches: each scope's recall index and its standing candidates.

Bounded by the number of memories held, not the number of scopes: one user with 10,000 memories weighs
as much as a hundred typical users, so a count of scopes says nothing about the memory the cache takes.
Everything cached is dropped when another process (an operator's CLI, a restore) wrote the database.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from companion.core import tiers
from companion.core.models import Memory, MemoryType, Scope, Tier, Validity
from companion.engine.types import Standing
from companion.recall.index import ScopeIndex, Tokenize
from companion.storage.base import MemoryStore

# What one cached memory costs (its Memory object, word and character postings), measured with
# tracemalloc on the scale bench's users: 4.0 KB per memory at 100 memories a user, 4.2 KB at 1,835
# (units and words interned, postings as lists; 8.5 and 8.2 KB before). Counted as 4.5 KB, for the small
# users' fixed part. The budget is set in MB (``INDEX_CACHE_MB``) and counted in memories.
BYTES_PER_MEMORY = 4608
DEFAULT_CACHE_MEMORIES = 48 * 2**20 // BYTES_PER_MEMORY
MAX_INSTRUCTIONS = 5
MAX_RECENT = 3
RECENT_WINDOW = timedelta(days=1)


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
        on_stale: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self._on_stale = on_stale  # other caches built on the same database
        self._tokenize = tokenize
        self.max_memories = max_memories
        self._indexes: OrderedDict[Scope, ScopeIndex] = OrderedDict()
        self._sizes: dict[Scope, int] = {}
        self._held = 0
        self._standing: dict[Scope, _Candidates] = {}
        self._change_count: int | None = None

    @property
    def held(self) -> int:
        """Memories held in cached indexes."""
        return self._held

    @property
    def scopes(self) -> int:
        return len(self._indexes)

    async def _check(self) -> None:
        self.observe(await self._store.change_counter())

    def observe(self, version: int) -> None:
        """The store's change counter, read here or with a turn's context (``turn_context``)."""
        if version != self._change_count:
            # Another process wrote: nothing cached can be trusted.
            self.clear()
            if self._on_stale is not None and self._change_count is not None:
                self._on_stale()
            self._change_count = version

    async def index(self, scope: Scope, *, checked: bool = False) -> ScopeIndex:
        """``checked``: the caller observed the change counter this turn (``observe``)."""
        if not checked:
            await self._check()
        index = self._indexes.get(scope)
        if index is not None:
            self._indexes.move_to_end(scope)
            return index
        return self.load(scope, await self._store.fetch_memories(scope))

    def load(self, scope: Scope, memories: Sequence[Memory]) -> ScopeIndex:
        """The scope's index built from its active memories, read by the caller."""
        index = ScopeIndex(list(memories), self._tokenize)
        self._indexes[scope] = index
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
        """Memories were written or changed: a loaded index takes them as stored now."""
        self._standing.pop(scope, None)
        index = self._indexes.get(scope)
        if index is not None:
            for memory in await self._store.fetch_by_ids(scope, ids):
                index.add(memory)
            self._recount(scope, index)

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

    def clear(self) -> None:
        self._indexes.clear()
        self._sizes.clear()
        self._held = 0
        self._standing.clear()

    async def standing(self, scope: Scope, now: datetime, *, checked: bool = False) -> Standing:
        """Per reply: the instructions that always apply, and core facts learned in the last day that the
        profile may not carry yet. Recall is not limited here: every active memory may be recalled."""
        if not checked:
            await self._check()
        cached = self._standing.get(scope)
        if cached is None:
            # From the cached index, not the database: a user with 10,000 memories must not pay a full
            # read per turn. Dropped whenever the index changes.
            active = list((await self.index(scope, checked=True)).memories.values())
            instructions = tiers.instructions(active)
            newest = sorted((m for m in active if m.is_active and is_core(m)), key=lambda m: m.created_at, reverse=True)
            cached = self._standing[scope] = _Candidates(
                [m.event for m in instructions][:MAX_INSTRUCTIONS], newest[:MAX_RECENT]
            )
        recent = [m.event for m in cached.newest if now - m.created_at <= RECENT_WINDOW]
        return Standing(cached.instructions, recent)


def is_core(memory: Memory) -> bool:
    """A fact or preference that lasts: kept past the short-term tier, or judged permanent."""
    return memory.type in (MemoryType.FACT, MemoryType.PREFERENCE) and (
        memory.tier is not Tier.SHORT or memory.validity is Validity.PERMANENT)
