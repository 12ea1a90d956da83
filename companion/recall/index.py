"""Recall: an in-memory index per scope and the one ranking used by the bot and the benchmarks.

Each memory is indexed by its keywords (full weight) and the words of its event text (lower weight).
A turn word matches a memory term when they are equal, when one contains the other (Chinese words of
two or more characters: "奶茶" ~ "珍珠奶茶", "感冒药" ~ "感冒"), or when English words share a stem
("hiking" ~ "hiked"). Relevance is BM25 over those weighted, fuzzy matches; importance and recency then
adjust it. Whether a memory is touched at all is decided separately, by ``match``: the idf-weighted
share of the turn's informative words (those some memory of this scope has) that the memory matches,
or, when the turn talks about several things, the share of the memory's own words the turn matched.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from companion.core.extraction import event_key
from companion.core.models import Memory, Recalled
from companion.core.rules import DAY

MIN_FRAGMENT = 2
CONTAINMENT_BASE = 0.6
KEYWORD_WEIGHT = 1.0
TEXT_WEIGHT = 0.6
BM25_K1 = 0.9
BM25_B = 0.4  # memories are short; long LoCoMo turns showed full length normalisation hurts
IMPORTANCE_SHARE = 0.25
RECENCY_SHARE = 0.15
RECENCY_HALF_LIFE_DAYS = 30.0
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("ly", ""), ("s", ""))

Tokenize = Callable[[str], list[str]]


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


def stem(word: str) -> str:
    """A deliberately small English stemmer ("hike", "hikes", "hiked", "hiking" -> "hik"); Chinese and
    short words pass through unchanged."""
    if not word.isascii() or len(word) <= 3:
        return word
    for suffix, replacement in _SUFFIXES:
        if word.endswith(suffix) and not word.endswith("ss") and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + replacement
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def containment_quality(short: str, long: str) -> float:
    return CONTAINMENT_BASE + (1 - CONTAINMENT_BASE) * len(short) / len(long)


def recency(memory: Memory, now: datetime) -> float:
    last = max(memory.created_at, memory.last_mentioned_at or memory.created_at)
    age_days = max(0.0, (now - last) / DAY)
    return float(0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS))


def combined_score(relevance: float, importance: float, fresh: float) -> float:
    """Relevance decides; importance and recency move a memory within about a quarter of its score."""
    return relevance * (1 - IMPORTANCE_SHARE + IMPORTANCE_SHARE * importance / 100) * (
        1 - RECENCY_SHARE + RECENCY_SHARE * fresh
    )


@dataclass(frozen=True, slots=True)
class Match:
    relevance: float
    match: float  # share of the turn's informative words this memory matched
    terms: Mapping[str, float]  # the memory's terms that matched, with the match quality


class ScopeIndex:
    """Terms of one scope's memories, indexed for exact, substring and stem lookups."""

    def __init__(self, memories: Iterable[Memory], tokenize: Tokenize | None = None) -> None:
        self._tokenize = tokenize
        self.memories: dict[int, Memory] = {}
        self._terms: dict[int, dict[str, float]] = {}
        self._lengths: dict[int, float] = {}
        self._postings: dict[str, set[int]] = defaultdict(set)
        self._fragments: dict[str, set[str]] = defaultdict(set)
        self._keywords: dict[str, set[int]] = defaultdict(set)
        self._events: dict[str, set[int]] = defaultdict(set)
        self._total_length = 0.0
        self._idf_cache: dict[int, float] = {}
        self._idf_size = -1
        for memory in memories:
            self.add(memory)

    def add(self, memory: Memory) -> None:
        """Index a new or changed memory (writes keep the cached index current without a reload)."""
        self.remove(memory.id)
        self.memories[memory.id] = memory
        self._events[event_key(memory.event)].add(memory.id)
        terms = self._memory_terms(memory)
        self._terms[memory.id] = terms
        self._lengths[memory.id] = sum(terms.values())
        self._total_length += self._lengths[memory.id]
        for term in terms:
            if term not in self._postings and not term.isascii():
                for fragment in _fragments(term):
                    self._fragments[fragment].add(term)
            self._postings[term].add(memory.id)
        for keyword in memory.keywords:
            self._keywords[keyword].add(memory.id)

    def _memory_terms(self, memory: Memory) -> dict[str, float]:
        words = memory.terms or (self._tokenize(memory.event) if self._tokenize else [])
        terms = {stem(w): TEXT_WEIGHT for w in words}
        terms.update({stem(k): KEYWORD_WEIGHT for k in memory.keywords})
        return terms

    def remove(self, memory_id: int) -> None:
        old = self.memories.pop(memory_id, None)
        if old is None:
            return
        self._events[event_key(old.event)].discard(memory_id)
        terms = self._terms.pop(memory_id, {})
        self._total_length -= self._lengths.pop(memory_id, 0.0)
        for term in terms:
            self._postings[term].discard(memory_id)
        for keyword in old.keywords:
            self._keywords[keyword].discard(memory_id)

    def candidates(self, event: str, keywords: Iterable[str]) -> list[Memory]:
        """Memories that could be the same event: same event text or at least two shared keywords."""
        ids = set(self._events.get(event_key(event), ()))
        shared: Counter[int] = Counter()
        for keyword in set(keywords):
            shared.update(self._keywords.get(keyword, ()))
        # same_event needs two shared keywords; one common word (a name in every turn) is not a candidate.
        ids.update(mid for mid, count in shared.items() if count >= 2)
        return [self.memories[mid] for mid in sorted(ids)]

    def _lookup(self, word: str) -> dict[str, float]:
        """Memory terms matching one query word, with the quality of each match."""
        word = stem(word)
        hits: dict[str, float] = {}
        if self._postings.get(word):
            hits[word] = 1.0
        if word.isascii():
            return hits
        for term in self._fragments.get(word, ()):
            if term != word and self._postings.get(term):
                hits[term] = containment_quality(word, term)
        for fragment in _fragments(word):
            if fragment != word and self._postings.get(fragment):
                hits[fragment] = max(hits.get(fragment, 0.0), containment_quality(fragment, word))
        return hits

    def matches(self, query: Iterable[str]) -> dict[int, Match]:
        """BM25 relevance and match share for every memory that shares a term with the query."""
        size = len(self.memories)
        if size == 0:
            return {}
        average = self._total_length / size or 1.0
        relevance: dict[int, float] = defaultdict(float)
        covered: dict[int, float] = defaultdict(float)
        matched_terms: dict[int, dict[str, float]] = defaultdict(dict)
        informative = 0.0
        for word in dict.fromkeys(query):
            best = self._best_per_memory(self._lookup(word))
            if not best:
                continue
            idf = self._idf(len(best))
            informative += idf
            for mid, (quality, weight, term) in best.items():
                tf = quality * weight
                norm = 1 - BM25_B + BM25_B * self._lengths[mid] / average
                relevance[mid] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * norm)
                covered[mid] += idf * quality
                matched_terms[mid][term] = max(matched_terms[mid].get(term, 0.0), quality)
        return {
            mid: Match(relevance[mid], covered[mid] / informative, matched_terms[mid]) for mid in relevance
        }

    def _idf(self, doc_count: int) -> float:
        size = len(self.memories)
        if self._idf_size != size:
            self._idf_cache.clear()
            self._idf_size = size
        idf = self._idf_cache.get(doc_count)
        if idf is None:
            idf = self._idf_cache[doc_count] = math.log(1 + (size - doc_count + 0.5) / (doc_count + 0.5))
        return idf

    def memory_share(self, memory_id: int, matched: Mapping[str, float]) -> float:
        """How much of the memory itself the turn matched (idf- and field-weighted): a memory whose own
        words are mostly there is touched even when the turn also talks about other things."""
        terms = self._terms[memory_id]
        weights = {t: self._idf(len(self._postings[t])) * w for t, w in terms.items()}
        total = sum(weights.values())
        return sum(weights[t] * q for t, q in matched.items() if t in weights) / total if total else 0.0

    def _best_per_memory(self, hits: Mapping[str, float]) -> dict[int, tuple[float, float, str]]:
        best: dict[int, tuple[float, float, str]] = {}
        for term, quality in hits.items():
            for mid in self._postings[term]:
                weight = self._terms[mid][term]
                if mid not in best or quality * weight > best[mid][0] * best[mid][1]:
                    best[mid] = (quality, weight, term)
        return best

    def rank(self, query: Iterable[str], now: datetime, rules: RecallFilter) -> list[Recalled]:
        """Best first, filtered. Candidates are scored first and filtered in score order, so a turn that
        may recall two memories stops after two (the memory-share check is the costly one)."""
        scored = [
            (combined_score(found.relevance, self.memories[mid].importance, recency(self.memories[mid], now)),
             mid, found)
            for mid, found in self.matches(query).items()
        ]
        scored.sort(key=lambda item: (-item[0], -item[1]))
        results: list[Recalled] = []
        for score, mid, found in scored:
            if rules.limit is not None and len(results) >= rules.limit:
                break
            match = self._admitted(mid, found, now, rules)
            if match is not None:
                results.append(Recalled(memory=self.memories[mid], score=score, match=match))
        return results

    def _admitted(self, mid: int, found: Match, now: datetime, rules: RecallFilter) -> float | None:
        memory = self.memories[mid]
        if memory.importance < rules.min_importance or memory.is_expired(now) or rules.cooling(mid):
            return None
        match = found.match
        if match < rules.min_match:
            match = max(match, self.memory_share(mid, found.terms))
        return match if match >= rules.min_match else None


def _fragments(word: str) -> set[str]:
    """Every substring of two or more characters of a Chinese word: the keys for containment lookups."""
    if len(word) < MIN_FRAGMENT or word.isascii():
        return set()
    return {word[i:j] for i in range(len(word)) for j in range(i + MIN_FRAGMENT, len(word) + 1)}


def mentions(reply: str, memory: Memory) -> bool:
    """The reply really brings the memory up: one of its keywords appears in the reply text."""
    text = reply.lower()
    return any(len(keyword) >= MIN_FRAGMENT and keyword in text for keyword in memory.keywords)
