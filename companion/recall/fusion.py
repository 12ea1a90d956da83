"""Reciprocal rank fusion: several rankings of the same items become one, by rank alone.

Scores from different retrievers (BM25 and cosine similarity) live on different scales; their ranks do
not. An item's fused score is the sum over rankings of ``weight / (k + rank)`` (rank from 1), so an item
near the top of either list rises, and one found by both rises most. ``k = 60`` is the usual constant
(Cormack et al., 2009): it keeps one first place from outweighing agreement further down.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

RRF_K = 60.0

Item = TypeVar("Item", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Item]], *, k: float = RRF_K, weights: Sequence[float] | None = None,
) -> list[tuple[Item, float]]:
    """Fused (item, score), best first; ties keep the order of first appearance (earlier lists first).
    A ranking that lists an item twice counts only its better rank."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError("one weight per ranking")
    scores: dict[Item, float] = {}
    for position, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[position]
        seen: set[Item] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda pair: (-pair[1], order[pair[0]]))
