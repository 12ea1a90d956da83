"""The character index: Chinese text as single characters and character pairs, English as stemmed words.

Word segmentation is the weak point of keyword recall in Chinese: jieba cuts "种花呢" into 种 + 花呢 in
one sentence and keeps 种花 whole in another, and a paraphrase (退货 / 退换, 小狗 / 狗狗) shares
characters but no word. Character pairs (bigrams) carry most of a word's meaning without depending on
where the cut falls; single characters (unigrams, at lower weight) bridge paraphrases. Latin text has
spaces, so it keeps word matching: a Latin run is one unit, stemmed like the word index does.

Scores are BM25 over these units. The same units give the gate its evidence: how much of the query's
information, or of the memory's own, the two share (``share``). There a unit weighs by its idf in the
scope, the scope counted as at least ``GATE_MIN_SCOPE`` memories so that in a new user's three
memories a word all three share does not look worthless.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from companion.core.text import normalize_text

UNIGRAM_WEIGHT = 0.5  # one shared character is weaker evidence than a shared pair
BIGRAM_WEIGHT = 1.0
WORD_WEIGHT = 1.0
BM25_K1 = 1.2
BM25_B = 0.5
# Units in more than this share of a big scope's memories (我, 今天 for a chatty user) add almost
# nothing to BM25 but cost a walk over thousands of postings: they are left out of the scoring walk.
MAX_DF_SHARE = 0.1
MIN_SCOPE_FOR_DF_CUT = 200
GATE_MIN_SCOPE = 50

_FREQUENCIES: dict[float, float] = {}
_RUNS = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+|[a-z0-9]+(?:'[a-z]+)?")
# Function characters that say nothing about a topic on their own; a pair with one of them still counts
# ("花呢", "王同" carry 花 and 王), a pair of two does not ("我的", "了吗").
STOP_CHARS = frozenset(
    "的了着过吗呢吧啊呀哦哈嗯喔哎唉嘛啦咯么和与及或而"
    "我你他她它们这那是在也都就还又再才很太挺更最个把被给让"
)
ENGLISH_STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "by", "for", "with", "from", "as",
    "is", "am", "are", "was", "were", "be", "been", "being", "do", "does", "did", "have", "has", "had", "i",
    "you", "he", "she", "it", "we", "they", "me", "him", "her", "us", "them", "my", "your", "his", "its", "our",
    "their", "this", "that", "these", "those", "what", "which", "who", "whom", "when", "where", "why", "how",
    "not", "no", "so", "too", "very", "can", "could", "will", "would", "shall", "should", "may", "might", "must",
    "just", "also", "there", "here", "than", "then", "about", "into", "over", "up", "down", "out", "off", "again",
    "s", "t", "don", "didn", "doesn", "isn", "wasn", "aren", "weren", "ve", "ll", "re", "d", "m", "o"
})
_SUFFIXES = (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("ly", ""), ("s", ""))


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


def fold(text: str) -> str:
    """The form units and keywords are read from: NFKC (full-width "ＡＢＣ" is "ABC"), lower case."""
    return unicodedata.normalize("NFKC", normalize_text(text)).lower()


@functools.lru_cache(maxsize=4096)
def units(text: str) -> dict[str, float]:
    """Weighted units of a text: CJK unigrams and bigrams, stemmed Latin words (stopwords dropped).
    Cached (a turn is read again as context): callers must not change the returned map."""
    out: dict[str, float] = defaultdict(float)
    folded = fold(text)
    for match in _RUNS.finditer(folded):
        run = match.group()
        if run.isascii():
            word = run.split("'")[0]
            if len(word) >= 2 and word not in ENGLISH_STOPWORDS and not word.isdigit():
                out[stem(word)] += WORD_WEIGHT
            continue
        # Interned: every cached index holds these units, and the same few thousand characters and pairs
        # recur across all users (one string each instead of one per memory that has it).
        for char in run:
            if char not in STOP_CHARS:
                out[sys.intern(char)] += UNIGRAM_WEIGHT
        for i in range(len(run) - 1):
            pair = run[i : i + 2]
            if pair[0] not in STOP_CHARS or pair[1] not in STOP_CHARS:
                out[sys.intern(pair)] += BIGRAM_WEIGHT
    return {unit: _FREQUENCIES.setdefault(weight, weight) for unit, weight in out.items()}


def unit_weight(unit: str) -> float:
    """The weight a unit carries as evidence (its weight in ``units``)."""
    if unit.isascii():
        return WORD_WEIGHT
    return UNIGRAM_WEIGHT if len(unit) == 1 else BIGRAM_WEIGHT


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a memory and a query share, as a share of the query's information (``asked``) and of the memory's
    own (``held``), each beside ``lone``: the share one unit alone carries on that side (the query's or the
    memory's heaviest unit). A chance match of one word is worth about ``lone``; the gate asks for more."""

    asked: float = 0.0
    asked_lone: float = 0.0
    held: float = 0.0
    held_lone: float = 0.0

    @property
    def share(self) -> float:
        return max(self.asked, self.held)

    def beyond_chance(self) -> float:
        """How far the match stands above one unit's worth, rescaled to 0..1 on the side that shows most:
        (share - lone) / (1 - lone)."""
        return max(_beyond(self.asked, self.asked_lone), _beyond(self.held, self.held_lone))


def _beyond(share: float, lone: float) -> float:
    return max(0.0, (share - lone) / (1 - lone)) if lone < 1 else 0.0


NO_EVIDENCE = Evidence()


class CharIndex:
    """Units of one scope's memories. ``add`` and ``remove`` keep it current without a rebuild."""

    def __init__(self) -> None:
        # unit -> the memories holding it; a unit's frequency in a memory is in ``_units`` (a list per
        # unit costs a third of a dict, and most units of a scope are in one or two of its memories).
        self._postings: dict[str, list[int]] = defaultdict(list)
        self._units: dict[int, dict[str, float]] = {}
        self._lengths: dict[int, float] = {}
        self._total_length = 0.0
        # The gate reads the same units' weights on every turn: kept until the index changes (a unit's
        # weight depends on the scope's size and its document frequency).
        self._weights: dict[str, float] = {}
        self._own_weight: dict[int, tuple[float, float]] = {}

    def __len__(self) -> int:
        return len(self._units)

    def add(self, memory_id: int, texts: Iterable[str]) -> None:
        self.remove(memory_id)
        self._changed()
        summed: dict[str, float] = defaultdict(float)
        for text in texts:
            for unit, weight in units(text).items():
                summed[unit] += weight
        # Frequencies are a few multiples of 0.5: one float object each, not one per unit of every memory.
        found = {unit: _FREQUENCIES.setdefault(tf, tf) for unit, tf in summed.items()}
        self._units[memory_id] = found
        length = sum(found.values())
        self._lengths[memory_id] = length
        self._total_length += length
        for unit in found:
            self._postings[unit].append(memory_id)

    def remove(self, memory_id: int) -> None:
        found = self._units.pop(memory_id, None)
        if found is None:
            return
        self._changed()
        self._total_length -= self._lengths.pop(memory_id, 0.0)
        for unit in found:
            postings = self._postings.get(unit)
            if postings is not None:
                postings.remove(memory_id)
                if not postings:
                    del self._postings[unit]

    def _changed(self) -> None:
        self._weights.clear()
        self._own_weight.clear()

    def idf(self, unit: str, size: int | None = None) -> float:
        size = len(self._units) if size is None else size
        df = len(self._postings.get(unit, ()))
        return math.log(1 + (size - df + 0.5) / (df + 0.5))

    def evidence_weight(self, unit: str) -> float:
        """What a unit is worth to the gate: informative in the language and in this scope."""
        weight = self._weights.get(unit)
        if weight is None:
            size = max(len(self._units), GATE_MIN_SCOPE)
            weight = self._weights[unit] = unit_weight(unit) * self.idf(unit, size)
        return weight

    def share(self, memory_id: int, query: Mapping[str, float], content: Mapping[str, float],
              covered: Mapping[str, float] | None = None) -> float:
        """The larger of the query's information this memory shares and the share of the memory's own
        information the query holds (a long turn about several things still touches a memory it covers
        whole); 0..1. The query's information is its content units plus whatever else it shares with
        the memory: a pair across two words counts when the memory has it ("种花" in 种 + 花呢) and is
        no dilution when it does not. ``covered``: content units of turn words the word index matched to
        this memory ("花生酱" ~ "花生"): they count as shared."""
        return self.evidence(memory_id, query, content, covered).share

    def evidence(self, memory_id: int, query: Mapping[str, float], content: Mapping[str, float],
                 covered: Mapping[str, float] | None = None) -> Evidence:
        """``share`` with what one unit alone would have given on each side (``Evidence``)."""
        own = self._units.get(memory_id)
        if not own:
            return NO_EVIDENCE
        weight = self.evidence_weight
        shared_units = {u: q for u, q in query.items() if u in own}
        of_memory = sum(q * weight(u) for u, q in shared_units.items())
        if of_memory <= 0:
            return NO_EVIDENCE
        extra = {u: q for u, q in (covered or {}).items() if u not in shared_units}
        shared = of_memory + sum(q * weight(u) for u, q in extra.items())
        of_memory += sum(q * weight(u) for u, q in extra.items() if u in own)
        shared_units.update(extra)
        rest = {u: q for u, q in content.items() if u not in shared_units}
        asked = shared + sum(q * weight(u) for u, q in rest.items())
        total, single = self._own(memory_id, own)
        lone = max(max(q * weight(u) for u, q in shared_units.items()),
                   max((q * weight(u) for u, q in rest.items()), default=0.0))
        return Evidence(min(1.0, shared / asked), lone / asked, min(1.0, of_memory / total), single / total)

    def _own(self, memory_id: int, own: Mapping[str, float]) -> tuple[float, float]:
        """A memory's total evidence weight and its heaviest unit's (kept until the index changes)."""
        cached = self._own_weight.get(memory_id)
        if cached is None:
            weights = [self.evidence_weight(u) for u in own]
            cached = self._own_weight[memory_id] = (sum(weights), max(weights))
        return cached

    def coverage(self, memory_id: int, clauses: Iterable[Mapping[str, float]],
                 covered: Mapping[str, float] | None = None) -> float:
        """The largest share of one clause's content this memory holds (0..1): what the memory is about
        must be something the user said in one breath, not words scattered over a long turn, nor only
        the function words it shares ("什么" in "你说什么就是什么吧")."""
        own = self._units.get(memory_id)
        if not own:
            return 0.0
        covered = covered or {}
        best = 0.0
        for clause in clauses:
            total = sum(self.evidence_weight(u) for u in clause)
            if total > 0:
                held = sum(self.evidence_weight(u) for u in clause if u in own or u in covered)
                best = max(best, held / total)
        return best

    def search(self, query: Mapping[str, float]) -> dict[int, float]:
        """BM25 for every memory sharing a unit with the query (query weights per unit)."""
        size = len(self._units)
        if size == 0:
            return {}
        average = self._total_length / size or 1.0
        cut = size * MAX_DF_SHARE if size >= MIN_SCOPE_FOR_DF_CUT else size + 1
        held = self._units
        score: dict[int, float] = defaultdict(float)
        for unit, q in query.items():
            postings = self._postings.get(unit)
            if not postings or len(postings) > cut:
                continue
            idf = q * self.idf(unit)
            for mid in postings:
                tf = held[mid][unit]
                norm = 1 - BM25_B + BM25_B * self._lengths[mid] / average
                score[mid] += idf * tf * (BM25_K1 + 1) / (tf + BM25_K1 * norm)
        return dict(score)
