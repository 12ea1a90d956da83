"""The dense retriever: semantic recall beside the keyword index, on when an embedding backend is configured.

Memories are embedded when they are written (outside the scope lock, batched) and their vectors kept by the
store's vectors capability (``MemoryStore.open_vectors``; SQLite keeps them in its own database); a turn is
embedded once and the scope's nearest memories are fused with the keyword ranking by reciprocal rank
fusion. The turn's vector is the weighted mean of the turn's, the user's two previous turns' and the companion's
last reply's (the keyword query's window and weights), so a turn that names its topic only before still finds it.
A dense candidate is admitted by how far it stands out from the scope's other nearest memories for this turn
(``standout``), not by one absolute cosine: a model's cosines and a scope's spread differ by model, language and
set, while "clearly closer than the rest" holds across them (measured leave-one-dataset-out,
docs/benchmarks-history.md §7).
A failing backend never fails a reply: recall falls back to keywords with one warning, and
the backend is tried again after ``retry_after`` seconds.
Memories whose embedding failed are picked up by the scope's next write or by ``python bot.py reindex``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np

from companion.core.models import Memory, Recalled, Scope, Status
from companion.core.timeutil import utcnow
from companion.engine.following import News
from companion.llm.embeddings import E5Embedder, Embedder, EmbeddingError, LocalEmbedder
from companion.recall.fusion import reciprocal_rank_fusion
from companion.recall.index import RecallFilter
from companion.recall.query import CURRENT_WEIGHT, EARLIER_USER_TURNS, REPLY_WEIGHT
from companion.recall.search_filters import MemoryFilter
from companion.storage.base import MemoryStore, VectorIndex, VectorRow, text_hash

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
SEARCH_DEPTH_FACTOR = 5  # filters drop dense candidates after the nearest-k cut: ask for more
STANDOUT_SKIP = 2  # the nearest few are the candidates, not the scope's usual similarity
MIN_REFERENCE = 3
MIN_SPREAD = 0.01  # cosines this close together are one level: no spread to divide by
# Turns' vectors kept (float32, 1.5 KB each at 384 dimensions): each turn comes back as context on its user's
# next two, so the cache must outlast a round of every active user's turn, or a busy bot encodes every window
# anew (256 cost 4 encodes a turn at 300 users: 118 messages/s against 330 without semantic recall).
QUERY_CACHE = 4096


@dataclass(frozen=True, slots=True)
class DensePolicy:
    min_similarity: float = 0.2  # an absolute floor below which nothing is close, whatever the scope
    # A memory found by meaning alone must stand this many standard deviations above the scope's usual
    # similarity to the turn (``standout``); 0 turns the rule off. Measured leave-one-dataset-out (§7).
    min_standout: float = 5.0
    # In a scope too small to measure the usual similarity (fewer than ``MIN_REFERENCE`` others), whether the
    # floor alone decides (a model whose cosines of unrelated texts lie low) or nothing is admitted by meaning
    # alone (a model that puts any two sentences close, as E5 does for Chinese: 0.8-0.9).
    floor_decides_small_scopes: bool = True
    standout_sample: int = 1000  # the scope's memories read for its usual similarity (all, in most scopes)
    by_scope_size: bool = False  # measure from the expected best of the scope's size (measured, not better)
    retry_after: float = 60.0  # seconds of keyword-only recall after a backend failure
    depth: int = 20  # candidates each retriever contributes to the fusion
    # The fusion: the dense ranking's weight (the keyword ranking's is 1) and the rank constant. 60, the usual
    # constant for many deep rankings, let a weaker ranking's agreement a few ranks down outvote the keyword
    # ranking's first place (LoCoMo hit@1 0.318 vs keywords alone 0.340); 1 lets a first place count. Chosen
    # on one half of LoCoMo's conversations and reported on the other, both ways, with a real model (§7).
    weight: float = 0.75
    fusion_k: float = 1.0
    sync_limit: int = 256  # memories a background write (extraction) embeds at most, and reindex's batch


def document(memory: Memory) -> str:
    """What is embedded for a memory: its event, then its keywords (the ways the user may talk about it)."""
    return f"{memory.event}（{'，'.join(memory.keywords)}）" if memory.keywords else memory.event


class DenseRetriever:
    def __init__(
        self, embedder: Embedder, vectors: VectorIndex, store: MemoryStore, policy: DensePolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.embedder = embedder
        self.vectors = vectors
        self._store = store
        self.policy = policy or DensePolicy()
        self.clock = clock  # monotonic seconds, for the retry timer
        self._down_until: float | None = None  # set while the backend is failing
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()

    @classmethod
    async def start(
        cls, store: MemoryStore, embedder: Embedder | None, policy: DensePolicy | None = None
    ) -> DenseRetriever | None:
        """A retriever with this backend, or None (no backend, or a store without vectors: lexical recall
        only). Takes ownership of ``embedder``: closed here when no retriever is made."""
        if embedder is None:
            return None
        vectors = await store.open_vectors()
        if vectors is None:
            await embedder.close()
            log.warning("semantic recall needs a store that keeps vectors; recall uses keywords only")
            return None
        if isinstance(embedder, LocalEmbedder | E5Embedder):
            try:
                await embedder.load()  # now, not on the first reply: loading takes seconds
            except EmbeddingError as exc:
                await vectors.close()
                log.warning("semantic recall off: %s", exc)
                return None
        log.info("semantic recall on: %s, vectors scored by %s", embedder.name, vectors.backend)
        return cls(embedder, vectors, store, policy)

    async def close(self) -> None:
        await self.embedder.close()
        await self.vectors.close()

    @property
    def model(self) -> str:
        return self.embedder.name

    # ---- health ----------------------------------------------------------------------------------

    @property
    def available(self) -> bool:
        return self._down_until is None or self.clock() >= self._down_until

    def _failed(self, exc: EmbeddingError, doing: str) -> None:
        if self._down_until is None:
            log.warning("embedding backend failed while %s (%s); recall uses keywords only, retrying in %.0f s",
                        doing, exc, self.policy.retry_after)
        else:
            log.debug("embedding backend still failing while %s: %s", doing, exc)
        self._down_until = self.clock() + self.policy.retry_after

    def retry_now(self) -> None:
        """Try the backend on the next call even if it failed less than ``retry_after`` ago."""
        self._down_until = None

    def _succeeded(self) -> None:
        if self._down_until is not None:
            log.info("embedding backend is back; semantic recall resumes")
            self._down_until = None

    async def _embed(self, texts: Sequence[str], *, query: bool, doing: str) -> list[list[float]] | None:
        if not self.available:
            return None
        try:
            vectors = await self.embedder.embed(texts, query=query)
        except EmbeddingError as exc:
            self._failed(exc, doing)
            return None
        self._succeeded()
        return vectors

    # ---- writes ----------------------------------------------------------------------------------

    async def sync(self, scope: Scope, now: datetime | None = None, *, limit: int | None = None,
                   force: bool = False) -> int:
        """After a write: drop the vectors of the scope's forgotten memories, then embed its active memories
        that have no vector for this model or whose text changed, most recently updated first, at most
        ``limit`` (the policy's when None). Call it outside any lock or transaction. Returns how many vectors
        were written; 0 when the backend is down."""
        await self.prune(scope)  # memories evicted or forgotten by this write
        if not self.available:
            return 0  # picked up by a later write or reindex
        memories = await self._store.fetch_memories(scope)
        return await self._embed_memories(scope, memories, now or utcnow(), limit or self.policy.sync_limit, force)

    async def _embed_memories(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, limit: int, force: bool
    ) -> int:
        known = {} if force else await self.vectors.hashes(scope, self.model)
        todo = [(m, document(m)) for m in sorted(memories, key=lambda m: (m.updated_at, m.id), reverse=True)]
        todo = [(m, doc) for m, doc in todo if known.get(m.id) != text_hash(doc)][:limit]
        if not todo:
            return 0
        vectors = await self._embed([doc for _, doc in todo], query=False, doing="embedding memories")
        if vectors is None:
            return 0
        rows = [VectorRow(m.id, text_hash(doc), v) for (m, doc), v in zip(todo, vectors, strict=True)]
        return await self.vectors.put(scope, self.model, rows, now)

    async def similar(
        self, scope: Scope, text: str, filters: MemoryFilter, statuses: Collection[Status], limit: int,
        exclude: Collection[int] = (),
    ) -> list[Memory]:
        """Search by meaning: the scope's memories in ``statuses`` that pass ``filters`` and the similarity
        floor, closest first, at most ``limit``; [] when the backend is down."""
        hits = await self.nearest(scope, text, max(limit * SEARCH_DEPTH_FACTOR + len(exclude),
                                                   self.policy.standout_sample))
        wanted = [h for h in self.admitted(hits) if h not in exclude]
        found = {m.id: m for m in await self._store.fetch_by_ids(scope, wanted)}
        admitted = [found[h] for h in wanted if h in found and found[h].status in statuses]
        return [m for m in admitted if filters.admits(m)][:limit]

    async def follow(self, news: News) -> None:
        """A follower of the change feed (``following``): memories whose text went (forgotten, cleaned up,
        evicted), here or in another process, lose their vectors now, not at the next write's ``sync``."""
        if news.removed or news.partial:
            await self.prune(news.scope)

    async def prune(self, scope: Scope | None = None) -> int:
        """Delete the vectors of forgotten memories (of one scope, or all): called after a forget, whatever
        forgot it (the user, a tool, capacity), and after the nightly cleanup, which tombstones in SQL."""
        return await self.vectors.prune(scope)

    async def reindex(self, *, force: bool = False, progress: Progress | None = None) -> int:
        """Embed every scope's active memories that lack a current vector (all of them with ``force``),
        dropping vectors of any other model. Raises EmbeddingError if the backend fails: an operator runs
        this and should see why."""
        await self.vectors.drop_other_models(self.model)
        total = await self._store.count_memories()
        done = written = 0
        if progress:
            progress(0, total)
        for scope in await self._store.scopes():
            memories = await self._store.fetch_memories(scope)
            for start in range(0, len(memories), self.policy.sync_limit):
                part = memories[start : start + self.policy.sync_limit]
                self.retry_now()  # the operator asked: try even if the bot saw it fail
                written += await self._embed_memories(scope, part, utcnow(), len(part), force)
                if self._down_until is not None:  # it failed just now
                    raise EmbeddingError("the embedding backend failed; see the warning above")
                done += len(part)
                if progress:
                    progress(done, max(total, done))
        return written

    # ---- recall ----------------------------------------------------------------------------------

    async def nearest(self, scope: Scope, text: str, k: int, *, earlier: Sequence[str] = (),
                      reply: str | None = None) -> list[tuple[int, float]]:
        """(handle, similarity) of the scope's closest memories to ``text`` read with its window (``earlier``,
        the user's previous turns, oldest first; ``reply``, the companion's last reply); [] when the backend
        is down."""
        vector = await self.query_vector(text, earlier=earlier, reply=reply)
        if vector is None:
            return []
        return await self.vectors.nearest(scope, self.model, vector, k)

    async def query_vector(self, text: str, *, earlier: Sequence[str] = (),
                           reply: str | None = None) -> list[float] | None:
        """The window's vectors, weighted as the keyword query weighs its messages, summed and normalised;
        None when there is nothing to embed or the backend is down. Texts embedded on an earlier turn come
        from a small cache, so a turn costs one request for its new text."""
        if not text.strip():
            return None
        recent = [t for t in earlier if t.strip()][-EARLIER_USER_TURNS:]
        window = [(text, CURRENT_WEIGHT)]
        window += [(t, CURRENT_WEIGHT / (1 + d)) for d, t in enumerate(reversed(recent), start=1)]
        if reply and reply.strip():
            window.append((reply, REPLY_WEIGHT))
        if not await self._cache_texts([t for t, _ in window], "embedding a turn"):
            return None
        summed = np.zeros_like(self._queries[text])
        for t, weight in window:
            self._queries.move_to_end(t)
            summed += weight * self._queries[t]
        while len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        norm = float(np.linalg.norm(summed)) or 1.0
        out: list[float] = (summed / norm).tolist()
        return out

    async def warm(self, text: str) -> None:
        """Encode a text the next turn's window will hold (the companion's reply, once it is on its way), so that
        turn encodes only its own words on the reply path."""
        if text.strip():
            await self._cache_texts([text], "embedding a reply")

    async def _cache_texts(self, texts: Sequence[str], doing: str) -> bool:
        """Encode the texts the turn cache lacks into it; False when the backend is down."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._queries))
        if missing:
            vectors = await self._embed(missing, query=True, doing=doing)
            if vectors is None:
                return False
            for t, v in zip(missing, vectors, strict=True):
                self._queries[t] = np.asarray(v, dtype=np.float32)
        return True

    def admitted(self, hits: Sequence[tuple[int, float]]) -> dict[int, float]:
        """The hits that pass the dense gate (``standout``), closest first."""
        return dict(standout(hits, self.policy))

    def widen(self, rules: RecallFilter) -> RecallFilter:
        """The keyword ranking's rules when it is to be fused: more candidates than the final cap."""
        return rules if rules.limit is None else replace(rules, limit=max(rules.limit, self.policy.depth))

    async def fuse(
        self, scope: Scope, text: str, now: datetime, rules: RecallFilter, lexical: Sequence[Recalled], *,
        earlier: Sequence[str] = (), reply: str | None = None,
    ) -> list[Recalled]:
        """Keyword results (already gated by ``rules``) fused with the memories closest in meaning that
        pass the same rules and the dense gate (lifted with the keyword gate, ``rules.min_match == 0``);
        capped at ``rules.limit``."""
        hits = await self.nearest(scope, text, max(self.policy.depth, self.policy.standout_sample),
                                  earlier=earlier, reply=reply)
        similar = dict(hits[: self.policy.depth]) if rules.min_match <= 0 else self.admitted(hits)
        found = {m.id: m for m in await self._store.fetch_by_ids(scope, list(similar))}
        gone = [h for h in similar if h not in found or found[h].status is Status.FORGOTTEN]
        if gone:
            await self.vectors.delete(gone)  # a tombstone the prune has not reached yet
        dense = [
            h for h in similar
            if h in found and found[h].is_active and rules.worth(found[h])
            and not found[h].is_expired(now) and not rules.cooling(h) and rules.allows(h)
        ]
        if not dense:
            return list(lexical[: rules.limit])
        by_id = {r.memory.id: r for r in lexical}
        fused = reciprocal_rank_fusion([[r.memory.id for r in lexical], dense], k=self.policy.fusion_k,
                                       weights=(1.0, self.policy.weight))[: rules.limit]
        return [
            Recalled(memory=by_id[h].memory, score=score, match=by_id[h].match) if h in by_id
            else Recalled(memory=found[h], score=score, match=similar[h])
            for h, score in fused
        ]


def standout(hits: Sequence[tuple[int, float]], policy: DensePolicy) -> list[tuple[int, float]]:
    """The hits (closest first) at or above the policy's floor that stand out from the scope's usual
    similarity to this turn: the similarities of its other memories (all but the first ``STANDOUT_SKIP``, the
    ones a turn may recall, up to ``standout_sample``). The bar is ``min_standout`` standard deviations above
    their mean, plus, with ``by_scope_size``, sqrt(2 ln n) more: about how far the best of n unrelated memories
    lies above the mean by chance, so a scope of 600 memories needs a clearer winner than one of 8. A scope
    with fewer than ``MIN_REFERENCE`` other memories has no usual similarity: there the floor alone decides, or,
    for a model whose floor means nothing (``floor_decides_small_scopes`` off), nothing stands out."""
    reference = [s for _, s in hits[STANDOUT_SKIP : policy.standout_sample]]
    if policy.min_standout > 0 and len(reference) < MIN_REFERENCE and not policy.floor_decides_small_scopes:
        return []
    floor = policy.min_similarity
    if policy.min_standout > 0 and len(reference) >= MIN_REFERENCE:
        mean = sum(reference) / len(reference)
        spread = max(MIN_SPREAD, math.sqrt(sum((s - mean) ** 2 for s in reference) / len(reference)))
        chance = math.sqrt(2 * math.log(len(hits))) if policy.by_scope_size else 0.0
        floor = max(floor, mean + (chance + policy.min_standout) * spread)
    return [(h, s) for h, s in hits if s >= floor]
