"""Keyword recall: an in-memory index per scope and the one ranking used by the bot and the benchmarks.

Matching is fuzzy in both directions: a turn keyword matches a memory keyword when they are equal
(quality 1) or one contains the other (quality scaled by the length ratio, at least two characters
shared), so "奶茶" finds "珍珠奶茶" and "感冒药" finds "感冒". Rare keywords weigh more (idf over the
scope's own memories).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from companion.extraction import event_key
from companion.models import Memory, Recalled
from companion.rules import DAY

MIN_FRAGMENT = 2
MIN_LATIN_PREFIX = 4
CONTAINMENT_BASE = 0.6
WEIGHT_MATCH = 0.6
WEIGHT_IMPORTANCE = 0.25
WEIGHT_RECENCY = 0.15
RECENCY_HALF_LIFE_DAYS = 30.0


@dataclass(frozen=True, slots=True)
class RecallFilter:
    """What a turn may recall. The benchmarks lift the cap, floor and cooldown; the bot uses settings."""

    limit: int | None = 2
    min_importance: float = 50.0
    min_match: float = 0.34
    cooldown_turns: int = 5
    turn: int = 0
    cooldown: Mapping[int, int] | None = None

    def cooling(self, memory_id: int) -> bool:
        if not self.cooldown or self.cooldown_turns <= 0:
            return False
        last = self.cooldown.get(memory_id)
        return last is not None and self.turn - last < self.cooldown_turns


def containment_quality(short: str, long: str) -> float:
    return CONTAINMENT_BASE + (1 - CONTAINMENT_BASE) * len(short) / len(long)


def recency(memory: Memory, now: datetime) -> float:
    last = max(memory.created_at, memory.last_mentioned_at or memory.created_at)
    age_days = max(0.0, (now - last) / DAY)
    return float(0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS))


def combined_score(match: float, importance: float, fresh: float) -> float:
    return WEIGHT_MATCH * match + WEIGHT_IMPORTANCE * importance / 100 + WEIGHT_RECENCY * fresh


class ScopeIndex:
    """Keywords of one scope's memories, indexed for exact and substring lookups."""

    def __init__(self, memories: Iterable[Memory]) -> None:
        self.memories: dict[int, Memory] = {}
        self._exact: dict[str, set[int]] = defaultdict(set)
        self._fragments: dict[str, set[str]] = defaultdict(set)
        self._events: dict[str, set[int]] = defaultdict(set)
        for memory in memories:
            self.add(memory)

    @property
    def _size(self) -> int:
        return max(len(self.memories), 1)

    def add(self, memory: Memory) -> None:
        """Index a new or changed memory (writes keep the cached index current without a reload)."""
        self.remove(memory.id)
        self.memories[memory.id] = memory
        self._events[event_key(memory.event)].add(memory.id)
        for keyword in memory.keywords:
            if keyword not in self._exact:
                for fragment in _fragments(keyword):
                    self._fragments[fragment].add(keyword)
            self._exact[keyword].add(memory.id)

    def remove(self, memory_id: int) -> None:
        old = self.memories.pop(memory_id, None)
        if old is None:
            return
        self._events[event_key(old.event)].discard(memory_id)
        for keyword in old.keywords:
            self._exact[keyword].discard(memory_id)

    def candidates(self, event: str, keywords: Iterable[str]) -> list[Memory]:
        """Memories that could be the same event: same event text or at least one shared keyword."""
        ids = set(self._events.get(event_key(event), ()))
        for keyword in keywords:
            ids |= self._exact.get(keyword, set())
        return [self.memories[mid] for mid in sorted(ids)]

    def _idf(self, doc_count: int) -> float:
        return math.log(1 + self._size / (1 + doc_count))

    def matches(self, query: Iterable[str]) -> dict[int, float]:
        """Match strength in [0, 1] for every memory sharing at least one keyword with the query: the mean
        of the share of query words it matches and the idf-weighted share of its own keywords matched.

        Query words count equally: a word no memory has would otherwise get the highest idf and drown
        the words that do match ("发烧了怎么办")."""
        per_memory: dict[int, dict[str, float]] = defaultdict(dict)  # id -> memory keyword -> quality
        query_hits: dict[int, float] = defaultdict(float)  # id -> sum of best quality per query word
        words = list(dict.fromkeys(query))
        for word in words:
            best: dict[int, float] = {}
            for keyword, quality in self._lookup(word).items():
                for mid in self._exact[keyword]:
                    seen = per_memory[mid]
                    seen[keyword] = max(seen.get(keyword, 0.0), quality)
                    best[mid] = max(best.get(mid, 0.0), quality)
            for mid, quality in best.items():
                query_hits[mid] += quality
        return {
            mid: 0.5 * query_hits[mid] / len(words) + 0.5 * self._memory_cover(mid, seen)
            for mid, seen in per_memory.items()
        }

    def _memory_cover(self, memory_id: int, seen: Mapping[str, float]) -> float:
        keywords = self.memories[memory_id].keywords
        weights = {k: self._idf(len(self._exact[k])) for k in keywords}
        total = sum(weights.values())
        return sum(weights[k] * seen.get(k, 0.0) for k in keywords) / total if total else 0.0

    def _lookup(self, word: str) -> dict[str, float]:
        """Memory keywords matching one query word, with the match quality of each."""
        hits: dict[str, float] = {}
        if word in self._exact:
            hits[word] = 1.0
        for keyword in self._fragments.get(word, ()):
            if keyword != word:
                hits[keyword] = containment_quality(word, keyword)
        for fragment in _fragments(word):
            if fragment != word and fragment in self._exact:
                hits[fragment] = max(hits.get(fragment, 0.0), containment_quality(fragment, word))
        return hits

    def rank(self, query: Iterable[str], now: datetime, rules: RecallFilter) -> list[Recalled]:
        results: list[Recalled] = []
        for mid, match in self.matches(query).items():
            memory = self.memories[mid]
            if match < rules.min_match or memory.importance < rules.min_importance:
                continue
            if memory.is_expired(now) or rules.cooling(mid):
                continue
            score = combined_score(match, memory.importance, recency(memory, now))
            results.append(Recalled(memory=memory, score=score, match=match))
        results.sort(key=lambda r: (-r.score, -r.memory.id))
        return results if rules.limit is None else results[: rules.limit]


def _fragments(word: str) -> set[str]:
    """Lookup keys for containment: every substring of two or more characters of a CJK word; for Latin
    words only prefixes of four or more letters, a cheap stemmer ("hikes" ~ "hike" but not "art" ~ "party";
    "hiking" ~ "hike" does not match, their shared prefix is three letters)."""
    if word.isascii():
        return {word[:j] for j in range(MIN_LATIN_PREFIX, len(word) + 1)}
    if len(word) < MIN_FRAGMENT:
        return set()
    return {word[i:j] for i in range(len(word)) for j in range(i + MIN_FRAGMENT, len(word) + 1)}


def mentions(reply: str, memory: Memory) -> bool:
    """The reply really brings the memory up: one of its keywords appears in the reply text."""
    text = reply.lower()
    return any(len(keyword) >= MIN_FRAGMENT and keyword in text for keyword in memory.keywords)
