"""``search_memories``: a scope's memories that match a query and metadata filters, for a command or a
model tool. Unlike recall it has no gate, floor or cooldown: the user (or the model on their behalf) asked.
Keyword and, when configured, dense results are fused by rank; a blank query lists the newest matches.
"""

from __future__ import annotations

from collections.abc import Sequence

from companion.core.models import Memory, Recalled, Scope
from companion.engine.retrievers import DenseRetriever
from companion.recall.filters import MemoryFilter
from companion.recall.fusion import reciprocal_rank_fusion
from companion.recall.index import RecallFilter
from companion.storage.base import MemoryStore

# Every memory the query's words touch, whatever its importance or how recently it came up.
SEARCH_RULES = RecallFilter(limit=None, min_importance=0.0, min_match=0.0, cooldown_turns=0)
DENSE_DEPTH_FACTOR = 5  # filters drop dense candidates after the nearest-k cut: ask for more


async def search_memories(
    store: MemoryStore, scope: Scope, query: str, lexical: Sequence[Recalled], dense: DenseRetriever | None,
    filters: MemoryFilter, limit: int,
) -> list[Memory]:
    """``lexical``: the keyword index's ranking of ``query`` under ``SEARCH_RULES``."""
    if limit <= 0:
        return []
    if not query.strip():
        listed = [m for m in await store.fetch_memories(scope) if filters.admits(m)]
        return sorted(listed, key=lambda m: (m.created_at, m.id), reverse=True)[:limit]
    found = {r.memory.id: r.memory for r in lexical if filters.admits(r.memory)}
    rankings = [list(found)]
    if dense is not None:
        hits = await dense.nearest(scope, query, limit * DENSE_DEPTH_FACTOR)
        similar = [h for h, s in hits if s >= dense.policy.min_similarity]
        fetched = {m.id: m for m in await store.fetch_by_ids(scope, similar) if m.is_active and filters.admits(m)}
        found.update(fetched)
        rankings.append([h for h in similar if h in fetched])
    return [found[h] for h, _ in reciprocal_rank_fusion(rankings)[:limit]]
