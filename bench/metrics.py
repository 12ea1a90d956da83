"""Retrieval metrics over ranked id lists, and a per-system accumulator."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

DEFAULT_KS: tuple[int, ...] = (1, 2, 5, 10)
Summary = dict[str, float | dict[str, float]]


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")


def hit_at_k(ranked_ids: Sequence[str], relevant: Collection[str], k: int) -> float:
    """1.0 when any relevant id is among the first k, else 0.0."""
    _check_k(k)
    return 1.0 if any(rid in relevant for rid in ranked_ids[:k]) else 0.0


def recall_at_k(ranked_ids: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Share of the relevant ids found in the first k (LoCoMo's and MemDaily's official metric)."""
    _check_k(k)
    gold = set(relevant)
    if not gold:
        raise ValueError("recall is undefined without relevant ids")
    return len(gold.intersection(ranked_ids[:k])) / len(gold)


def reciprocal_rank(ranked_ids: Sequence[str], relevant: Collection[str]) -> float:
    """1/rank of the first relevant id; 0.0 when none was returned."""
    for rank, rid in enumerate(ranked_ids, start=1):
        if rid in relevant:
            return 1.0 / rank
    return 0.0


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"p must be within 0..100, got {p}")
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class QueryResult:
    query_id: str
    ranked_ids: tuple[str, ...]
    relevant: frozenset[str]
    latency_ms: float


class MetricsAccumulator:
    """Collects one system's answers, query by query, and summarises them.

    MRR is computed over whatever the system returned, so callers should ask every system for the same
    depth (max of ks) to keep MRR comparable.
    """

    def __init__(self, ks: Sequence[int] = DEFAULT_KS) -> None:
        if not ks:
            raise ValueError("at least one k is needed")
        for k in ks:
            _check_k(k)
        self.ks: tuple[int, ...] = tuple(sorted(set(ks)))
        self.results: list[QueryResult] = []

    @property
    def count(self) -> int:
        return len(self.results)

    @property
    def depth(self) -> int:
        return self.ks[-1]

    def add(self, query_id: str, ranked_ids: Sequence[str], relevant: Collection[str],
            latency_ms: float) -> None:
        if not relevant:
            raise ValueError(f"query {query_id!r} has no relevant ids")
        self.results.append(QueryResult(query_id, tuple(ranked_ids), frozenset(relevant), latency_ms))

    def summary(self) -> Summary:
        """hit@k for each k, recall@k for each k, mrr, latency percentiles; rounded to 4 decimals."""
        results = self.results
        if not results:
            raise ValueError("no queries recorded")
        out: Summary = {}
        for k in self.ks:
            out[f"hit@{k}"] = _mean([hit_at_k(r.ranked_ids, r.relevant, k) for r in results])
        for k in self.ks:
            out[f"recall@{k}"] = _mean([recall_at_k(r.ranked_ids, r.relevant, k) for r in results])
        out["mrr"] = _mean([reciprocal_rank(r.ranked_ids, r.relevant) for r in results])
        latencies = [r.latency_ms for r in results]
        out["latency_ms"] = {"p50": round(percentile(latencies, 50), 4),
                             "p95": round(percentile(latencies, 95), 4)}
        return out


class InjectionCounts:
    """What the bot, with its real gate and limit, injects per kind of turn: on "positive" turns the
    share that inject a gold memory (gated hit) and the share that inject anything; on turns no memory is
    relevant to ("negative", "other user") the share that inject anything: the false-injection rate."""

    def __init__(self) -> None:
        self.turns: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        self.gold: dict[str, int] = {}

    def add(self, kind: str, injected: Sequence[str], relevant: Collection[str]) -> None:
        self.turns[kind] = self.turns.get(kind, 0) + 1
        self.injected[kind] = self.injected.get(kind, 0) + bool(injected)
        self.gold[kind] = self.gold.get(kind, 0) + any(rid in relevant for rid in injected)

    def rate(self, kind: str) -> float | None:
        turns = self.turns.get(kind, 0)
        return round(self.injected[kind] / turns, 4) if turns else None

    @property
    def false_injection(self) -> float | None:
        """Over every turn no stored memory is relevant to, of either kind."""
        turns = sum(self.turns.get(kind, 0) for kind in NEGATIVE_KINDS)
        injected = sum(self.injected.get(kind, 0) for kind in NEGATIVE_KINDS)
        return round(injected / turns, 4) if turns else None

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        positives = self.turns.get("positive", 0)
        if positives:
            out["gated hit"] = round(self.gold["positive"] / positives, 4)
            out["injects on positive"] = round(self.injected["positive"] / positives, 4)
        for kind in NEGATIVE_KINDS:
            rate = self.rate(kind)
            if rate is not None:
                out[f"false injection, {kind}"] = rate
                out[f"{kind} turns"] = self.turns[kind]
        total = self.false_injection
        if total is not None:
            out["false injection"] = total
        for kind in SUBSET_KINDS:  # subsets of the kinds above, reported apart, not in the total
            apart = self.rate(kind)
            if apart is not None:
                out[f"false injection, {kind}"] = apart
                out[f"{kind} turns"] = self.turns[kind]
        clean_turns = sum(self.turns.get(kind, 0) for kind in CLEAN_KINDS)
        if clean_turns:
            out["false injection, clean"] = round(
                sum(self.injected.get(kind, 0) for kind in CLEAN_KINDS) / clean_turns, 4)
        return out


NEGATIVE_KINDS = ("negative", "other user")
OTHER_APART = "other user, names apart"
# The negatives that are negatives by a rule read from the data set, not the engine (``bench.recall``):
# chit-chat the data set does not annotate as stating a stored fact; other-user turns whose other scope
# neither names the question's own thing nor shares a schema subject with it.
CHAT_CLEAN = "negative, not about a stored memory"
OTHER_CLEAN = "other user, subjects apart"
SUBSET_KINDS = (OTHER_APART, CHAT_CLEAN, OTHER_CLEAN)
CLEAN_KINDS = (CHAT_CLEAN, OTHER_CLEAN)


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4)
