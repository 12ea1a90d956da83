"""Recall: an in-memory index per scope and the one ranking used by the bot and the benchmarks.

Two rankings of the same memories, fused by rank (reciprocal rank fusion):
- words: each memory's keywords (full weight) and the words of its event text (lower weight). A turn
  word matches a memory term when they are equal, when one contains the other (Chinese words of two or
  more characters: "奶茶" ~ "珍珠奶茶"), or when English words share a stem. BM25 over those matches.
- characters (``chars``): Chinese as single characters and character pairs, so a word jieba cuts
  differently in the memory and in the turn ("种花呢" -> 种 + 花呢), or a paraphrase sharing characters
  (退货 / 退换), still matches; English as stemmed words.
Importance and recency adjust each ranking before fusion. Whether a memory is touched at all is the
gate's call (``RecallFilter.min_match``): the share of the query's information the memory shares, or of
the memory's own, measured on the character units, counted beyond what one unit alone would give on that
side (``Evidence.beyond_chance``: a question of three English words shares a third with any memory holding one
of them by chance, one of twenty Chinese units does not), whichever side shows more; and the
memory must hold at least ``MIN_CLAUSE_COVERAGE`` of the content of one clause of the turn or its context
(``CharIndex.coverage``), so that neither shared function words nor words scattered over a long turn
carry it. Unless the turn names the memory's topic outright: a distinctive word of the turn that is one of
its keywords (``Query.anchors``, ``KeywordExtractor.distinctive``) touches it whatever the share.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from companion.core.extraction import event_key
from companion.core.models import Memory, Recalled
from companion.core.rules import DAY, told_importance
from companion.recall.chars import CharIndex, Evidence, stem, units
from companion.recall.query import Query

MIN_FRAGMENT = 2
CONTAINMENT_BASE = 0.6
KEYWORD_WEIGHT = 1.0
TEXT_WEIGHT = 0.6
BM25_K1 = 0.9
BM25_B = 0.4  # memories are short; long LoCoMo turns showed full length normalisation hurts
IMPORTANCE_SHARE = 0.25
RECENCY_SHARE = 0.15
RECENCY_HALF_LIFE_DAYS = 30.0
RRF_K = 60  # the usual constant: a memory both rankings place well beats one only one places first
FUSION_DEPTH = 50  # each ranking contributes its best this many; deeper ranks add next to nothing
# Only the best few fused candidates may pass the gate: one ranked 30th that happens to share a lot of
# its few words with the turn is more often chance than the topic.
GATE_DEPTH = 5
# Importance and recency scale a score by 0.64..1, so only the best by raw score can reach the fused top:
# rank this many by raw score first (4 x the fusion depth is ample; the bound is not exact at ties).
PREFILTER = 4 * FUSION_DEPTH
# The gate's threshold on the match beyond one unit's worth (``Evidence.beyond_chance``), chosen
# leave-one-dataset-out (docs/benchmarks-history.md §1b, sixth pass): the lowest at which every other set keeps false
# injection within half the 10% goal; it held within 10% on every held-out set, English and Chinese.
DEFAULT_MIN_MATCH = 0.25
# A distinctive word of the turn (``Query.anchors``) touches a memory whose keyword it is when at most this many
# of the scope's memories hold it: the per-turn cap, so the word picks those memories out.
ANCHOR_MAX_MEMORIES = 2
# A touched memory must also hold at least this share of one clause's content (``CharIndex.coverage``).
MIN_CLAUSE_COVERAGE = 0.3

Tokenize = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class RecallFilter:
    """What a turn may recall. The benchmarks lift the cap, floor and cooldown; the bot uses settings."""

    limit: int | None = 2
    min_importance: float = 50.0
    min_match: float = DEFAULT_MIN_MATCH
    cooldown_turns: int = 5
    turn: int = 0
    cooldown: Mapping[int, int] | None = None
    # Memories that may be recalled at all (the reply's tiers); None: every one. The others are passed
    # over without taking a place in the gate's depth.
    allowed: Collection[int] | None = None
    # When the oldest earlier turn of the query's window was said (None: not known). A memory learned since
    # is matched by the turn alone: the window's turns are where it was learned, and the reply carries them,
    # so it would come back on the next turn, whatever that turn is about.
    window_since: datetime | None = None

    def through_window(self, memory: Memory) -> bool:
        """Whether the query's window (earlier turns, the last reply) may recall ``memory``."""
        return self.window_since is None or memory.created_at < self.window_since

    def allows(self, memory_id: int) -> bool:
        return self.allowed is None or memory_id in self.allowed

    def worth(self, memory: Memory) -> bool:
        """Important enough to bring up, judged by the importance it was told with (``told_importance``):
        decay lowers its rank, expiry and cleanup end it, neither hides it while it lasts."""
        return self.min_importance <= 0 or told_importance(
            memory.importance, memory.validity, memory.created_at, memory.last_decay_at) >= self.min_importance

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


def combined_score(relevance: float, importance: float, fresh: float) -> float:
    """Relevance decides; importance and recency move a memory within about a quarter of its score."""
    return relevance * (1 - IMPORTANCE_SHARE + IMPORTANCE_SHARE * importance / 100) * (
        1 - RECENCY_SHARE + RECENCY_SHARE * fresh
    )


MIN_FACTOR = combined_score(1.0, 0.0, 0.0)  # the most importance and recency can scale a score down


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
        # Lists, not sets: a scope holds thousands of these and most have one or two members (a set of
        # one costs 216 bytes, a list of one 64). Each member is added once (``add`` removes first).
        self._postings: dict[str, list[int]] = defaultdict(list)
        self._fragments: dict[str, list[str]] = defaultdict(list)
        self._keywords: dict[str, list[int]] = defaultdict(list)
        self._events: dict[str, list[int]] = defaultdict(list)
        self._total_length = 0.0
        self._idf_cache: dict[int, float] = {}
        self._idf_size = -1
        # A turn's words come back as context on the next turns: their term lookups are kept until the
        # index changes.
        self._lookups: dict[str, dict[str, float]] = {}
        self._chars = CharIndex()
        for memory in memories:
            self.add(memory)

    def add(self, memory: Memory) -> None:
        """Index a new or changed memory (writes keep the cached index current without a reload)."""
        self.remove(memory.id)
        self._lookups.clear()
        self.memories[memory.id] = memory
        self._events[event_key(memory.event)].append(memory.id)
        terms = self._memory_terms(memory)
        self._terms[memory.id] = terms
        self._lengths[memory.id] = sum(terms.values())
        self._total_length += self._lengths[memory.id]
        for term in terms:
            if term not in self._postings and not term.isascii():
                for fragment in _fragments(term):
                    self._fragments[fragment].append(term)
            self._postings[term].append(memory.id)
        for keyword in dict.fromkeys(memory.keywords):
            self._keywords[keyword].append(memory.id)
        self._chars.add(memory.id, [memory.event, *memory.keywords])

    def holds(self, word: str) -> bool:
        """Whether some memory of the scope already says ``word`` (a term, a keyword or in its words)."""
        return bool(self._postings.get(stem(word))) or any(word in m.event for m in self.memories.values())

    def _memory_terms(self, memory: Memory) -> dict[str, float]:
        words = memory.terms or (self._tokenize(memory.event) if self._tokenize else [])
        terms = {stem(w): TEXT_WEIGHT for w in words}
        terms.update({stem(k): KEYWORD_WEIGHT for k in memory.keywords})
        return terms

    def remove(self, memory_id: int) -> None:
        old = self.memories.pop(memory_id, None)
        if old is None:
            return
        self._lookups.clear()
        _drop(self._events, event_key(old.event), memory_id)
        terms = self._terms.pop(memory_id, {})
        self._total_length -= self._lengths.pop(memory_id, 0.0)
        for term in terms:
            self._postings[term].remove(memory_id)  # kept when empty: its fragments stay registered
        for keyword in dict.fromkeys(old.keywords):
            _drop(self._keywords, keyword, memory_id)
        self._chars.remove(memory_id)

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
        """Memory terms matching one query word, with the quality of each match (callers must not change
        the returned map: it is cached)."""
        hits = self._lookups.get(word)
        if hits is None:
            hits = self._lookups[word] = self._find(word)
        return hits

    def _find(self, word: str) -> dict[str, float]:
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

    def matches(self, query: Iterable[str] | Mapping[str, float]) -> dict[int, Match]:
        """BM25 relevance and match share for every memory that shares a term with the query; a mapping
        gives each word its weight (context words count less than the turn's own)."""
        size = len(self.memories)
        if size == 0:
            return {}
        average = self._total_length / size or 1.0
        relevance: dict[int, float] = defaultdict(float)
        covered: dict[int, float] = defaultdict(float)
        matched_terms: dict[int, dict[str, float]] = defaultdict(dict)
        informative = 0.0
        weighted = query if isinstance(query, Mapping) else dict.fromkeys(query, 1.0)
        for word, q in weighted.items():
            best = self._best_per_memory(self._lookup(word))
            if not best:
                continue
            idf = q * self._idf(len(best))
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

    def relevance(self, query: Mapping[str, float]) -> dict[int, float]:
        """The BM25 relevance of ``matches`` alone: the ranking needs nothing else, and at 10,000
        memories building a ``Match`` for each of thousands of candidates costs milliseconds."""
        size = len(self.memories)
        if size == 0:
            return {}
        average = self._total_length / size or 1.0
        relevance: dict[int, float] = defaultdict(float)
        for word, q in query.items():
            best = self._best_per_memory(self._lookup(word))
            if not best:
                continue
            idf = q * self._idf(len(best))
            for mid, (quality, weight, _) in best.items():
                tf = quality * weight
                norm = 1 - BM25_B + BM25_B * self._lengths[mid] / average
                relevance[mid] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * norm)
        return relevance

    def _idf(self, doc_count: int) -> float:
        size = len(self.memories)
        if self._idf_size != size:
            self._idf_cache.clear()
            self._idf_size = size
        idf = self._idf_cache.get(doc_count)
        if idf is None:
            idf = self._idf_cache[doc_count] = math.log(1 + (size - doc_count + 0.5) / (doc_count + 0.5))
        return idf

    def _best_per_memory(self, hits: Mapping[str, float]) -> dict[int, tuple[float, float, str]]:
        best: dict[int, tuple[float, float, str]] = {}
        for term, quality in hits.items():
            for mid in self._postings[term]:
                weight = self._terms[mid][term]
                if mid not in best or quality * weight > best[mid][0] * best[mid][1]:
                    best[mid] = (quality, weight, term)
        return best

    def rank(self, query: Query | Iterable[str], now: datetime, rules: RecallFilter) -> list[Recalled]:
        """Best first, filtered: the word and character rankings fused by rank, then the gate in fused
        order, so a turn that may recall two memories stops after two admitted ones."""
        if not isinstance(query, Query):
            query = Query.from_words(query)
        factors: dict[int, float] = {}
        word_scores = self._adjusted(self.relevance(query.words), now, factors)
        # English keeps word matching: its character units are its words again, so a second ranking of
        # the same words would only blur the word index's own (containment, field weights).
        chinese = any(not unit.isascii() for unit in query.units)
        rankings = [word_scores]
        if chinese:
            rankings.append(self._adjusted(self._chars.search(query.units), now, factors))
        fused = fuse(rankings)
        results: list[Recalled] = []
        position = 0
        for mid, score in fused:
            if not rules.allows(mid):
                continue
            if rules.limit is not None and (len(results) >= rules.limit or position >= GATE_DEPTH):
                break
            position += 1
            match = self._admitted(mid, query, now, rules)
            if match is not None:
                results.append(Recalled(memory=self.memories[mid], score=score, match=match))
        return results

    def _adjusted(self, scores: Mapping[int, float], now: datetime, cache: dict[int, float]) -> dict[int, float]:
        """Scores times importance and recency, for the candidates that can still reach the fused top:
        the factor lies within [0.64, 1], so the best few by raw score hold every one that can."""
        if len(scores) > FUSION_DEPTH:
            best = heapq.nlargest(PREFILTER, scores.items(), key=lambda item: item[1])
            # A memory below the fusion depth's raw score times the lowest factor cannot overtake any of the
            # best FUSION_DEPTH after adjustment: no need to compute its factor.
            floor = best[FUSION_DEPTH - 1][1] * MIN_FACTOR
            scores = {mid: score for mid, score in best if score >= floor}
        return {mid: score * self._factor(mid, now, cache) for mid, score in scores.items()}

    def _factor(self, mid: int, now: datetime, cache: dict[int, float]) -> float:
        factor = cache.get(mid)
        if factor is None:
            memory = self.memories[mid]
            factor = cache[mid] = combined_score(1.0, memory.importance, recency(memory, now))
        return factor

    def _admitted(self, mid: int, query: Query, now: datetime, rules: RecallFilter) -> float | None:
        memory = self.memories[mid]
        if not rules.worth(memory) or memory.is_expired(now) or rules.cooling(mid):
            return None
        match = self._passes(mid, query, rules) if query.turn is None or rules.through_window(memory) else None
        if match is None and query.turn is not None:
            match = self._passes(mid, query.turn, rules)
        return match

    def _passes(self, mid: int, query: Query, rules: RecallFilter) -> float | None:
        """How far the memory's match stands beyond one unit's worth (``Evidence.beyond_chance``) when it
        clears the gate, else None. A memory one of whose keywords the turn names with a distinctive word
        (``Query.anchors``) clears it whatever the share: one such word is the topic, not chance."""
        covered = self._covered(mid, query)
        match = self._chars.evidence(mid, query.units, query.content, covered).beyond_chance()
        if rules.min_match > 0 and self._anchored(mid, query):
            return max(match, rules.min_match)
        if match < rules.min_match:
            return None
        clauses = query.clauses  # none for bare words: no clause is known
        if rules.min_match > 0 and clauses and self._chars.coverage(mid, clauses, covered) < MIN_CLAUSE_COVERAGE:
            return None
        return match

    def _anchored(self, mid: int, query: Query) -> bool:
        terms = self._terms.get(mid, {})
        for word in query.anchors:
            term = stem(word)
            # A word many of the scope's memories hold names no one of them ("持续时间" of every event).
            if terms.get(term) == KEYWORD_WEIGHT and len(self._postings.get(term, ())) <= ANCHOR_MAX_MEMORIES:
                return True
        return False

    def evidence(self, mid: int, query: Query) -> tuple[Evidence, float]:
        """What the gate reads for this memory and query: the shares (``CharIndex.evidence``) and the clause
        coverage (1 when the query tells no clauses). For benchmarks that replay the gate offline."""
        covered = self._covered(mid, query)
        found = self._chars.evidence(mid, query.units, query.content, covered)
        clauses = query.clauses
        return found, (self._chars.coverage(mid, clauses, covered) if clauses else 1.0)

    def _covered(self, mid: int, query: Query) -> dict[str, float]:
        """Content units of the turn's words that match one of this memory's terms as words."""
        terms = self._terms.get(mid, {})
        covered: dict[str, float] = {}
        for word, weight in query.words.items():
            if any(term in terms for term in self._lookup(word)):
                for unit in units(word):
                    covered[unit] = max(covered.get(unit, 0.0), weight)
        return covered


def fuse(rankings: Iterable[Mapping[int, float]], depth: int = FUSION_DEPTH) -> list[tuple[int, float]]:
    """Reciprocal rank fusion of score maps (higher is better): each contributes 1 / (RRF_K + rank) for
    its best ``depth`` memories. Best first; ties go to the newer memory (higher id)."""
    fused: dict[int, float] = defaultdict(float)
    for scores in rankings:
        best = heapq.nlargest(depth, scores.items(), key=lambda item: (item[1], item[0]))
        for rank, (mid, _) in enumerate(best, start=1):
            fused[mid] += 1.0 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: (-item[1], -item[0]))


def _drop(lists: dict[str, list[int]], key: str, memory_id: int) -> None:
    members = lists.get(key)
    if members is not None and memory_id in members:
        members.remove(memory_id)
        if not members:
            del lists[key]


def _fragments(word: str) -> set[str]:
    """Every substring of two or more characters of a Chinese word: the keys for containment lookups."""
    if len(word) < MIN_FRAGMENT or word.isascii():
        return set()
    return {word[i:j] for i in range(len(word)) for j in range(i + MIN_FRAGMENT, len(word) + 1)}


def mentions(reply: str, memory: Memory) -> bool:
    """The reply really brings the memory up: one of its keywords appears in the reply text."""
    text = reply.lower()
    return any(len(keyword) >= MIN_FRAGMENT and keyword in text for keyword in memory.keywords)
