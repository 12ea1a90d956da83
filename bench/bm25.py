"""Okapi BM25 baseline: an incremental inverted index per user scope, pure Python.

The IDF is the non-negative Lucene form ``ln(1 + (N - df + 0.5) / (df + 0.5))``: the classic Robertson
form goes negative for terms in more than half the documents, which would punish a memory for sharing a
common word with the query, and small scopes (a new user with a handful of memories) hit that often.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable, Sequence

K1 = 1.5
B = 0.75


class BM25Index:
    """One scope. Statistics (N, avgdl, df) are read at search time, so adding is O(len(doc))."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._ids: list[str] = []
        self._lengths: list[int] = []
        self._total_length = 0
        self._postings: dict[str, dict[int, int]] = {}  # term -> {doc number: term frequency}
        self._known: set[str] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        if doc_id in self._known:
            raise ValueError(f"document {doc_id!r} is already indexed")
        self._known.add(doc_id)
        number = len(self._ids)
        self._ids.append(doc_id)
        self._lengths.append(len(tokens))
        self._total_length += len(tokens)
        for term, tf in Counter(tokens).items():
            self._postings.setdefault(term, {})[number] = tf

    def idf(self, term: str) -> float:
        df = len(self._postings.get(term, ()))
        return math.log(1.0 + (len(self._ids) - df + 0.5) / (df + 0.5))

    def search(self, tokens: Iterable[str], k: int) -> list[tuple[str, float]]:
        """Top k (doc id, score), best first; only documents sharing a query term are scored."""
        if k < 1 or not self._ids:
            return []
        avgdl = self._total_length / len(self._ids) or 1.0
        scores: dict[int, float] = {}
        # A repeated query term counts once per occurrence, as in the Okapi sum over query terms.
        for term, qtf in Counter(tokens).items():
            postings = self._postings.get(term)
            if not postings:
                continue
            weight = qtf * self.idf(term)
            norm = self.k1 * (1.0 - self.b)
            per_length = self.k1 * self.b / avgdl
            for number, tf in postings.items():
                denominator = tf + norm + per_length * self._lengths[number]
                scores[number] = scores.get(number, 0.0) + weight * tf * (self.k1 + 1.0) / denominator
        # Ties go to the newer document: among equal matches the latest statement is the current one.
        best = heapq.nlargest(k, scores.items(), key=lambda item: (item[1], item[0]))
        return [(self._ids[number], score) for number, score in best]


class ScopedBM25:
    """Independent indexes per user, created on first use: scopes never share statistics or results."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._scopes: dict[str, BM25Index] = {}

    def scope(self, user: str) -> BM25Index:
        index = self._scopes.get(user)
        if index is None:
            index = self._scopes[user] = BM25Index(self.k1, self.b)
        return index

    def add(self, user: str, doc_id: str, tokens: Sequence[str]) -> None:
        self.scope(user).add(doc_id, tokens)

    def search(self, user: str, tokens: Iterable[str], k: int) -> list[tuple[str, float]]:
        index = self._scopes.get(user)
        return [] if index is None else index.search(tokens, k)
