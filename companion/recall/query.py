"""The recall query: what the current turn and the recent context say, weighted toward the current turn.

A turn often names its topic only in an earlier message ("我家狗狗最近不吃饭" … "它今天还是没精神"), so
the query reads the last user turns and the companion's last reply too, each at a lower weight than the
turn itself; a unit keeps the highest weight of any message it appears in.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from companion.recall.chars import fold, units

CURRENT_WEIGHT = 1.0
# The last user turn, the one before it, ...: 1 / (1 + distance), so the current turn always leads.
EARLIER_USER_TURNS = 2
REPLY_WEIGHT = 0.4
# Clause boundaries: sentence and clause punctuation, and 另外 ("besides"), which joins two questions.
CLAUSE_BREAK = re.compile(r"[，。！？；：,.!?;:\n…~～]+|另外")

Tokenize = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class Query:
    """Words for the word index and units for the character index, each with its weight (0..1].
    ``content`` holds the units of the content words alone: what the turn is about, for the gate
    (pairs across two words, "我今" in 我今天, and function words are no information). ``clauses``: the
    content units of each clause of each message read, for the gate's coverage rule."""

    words: dict[str, float] = field(default_factory=dict)
    units: dict[str, float] = field(default_factory=dict)
    content: dict[str, float] = field(default_factory=dict)
    clauses: list[dict[str, float]] = field(default_factory=list)
    # The current turn's words that name a topic by themselves (``build_query``'s ``distinctive``): a memory
    # whose keyword one of them is touched, however little else of the turn it shares.
    anchors: set[str] = field(default_factory=set)
    # The current turn alone, when earlier messages were read too: the gate admits a memory that covers
    # enough of either, so the window helps a vague turn ("它还是没精神") and never hides what the turn
    # itself names after a change of topic.
    turn: Query | None = None

    def __bool__(self) -> bool:
        return bool(self.words or self.units)

    @classmethod
    def from_words(cls, words: Iterable[str]) -> Query:
        """A query from words alone (callers that have already tokenised the turn)."""
        query = cls()
        for word in words:
            query.add(word, [word], CURRENT_WEIGHT)
        query.clauses.clear()  # words alone tell no clauses: the coverage rule does not apply
        return query

    def add(self, text: str, words: Iterable[str], weight: float) -> None:
        words = tuple(words)
        _raise(self.words, words, weight)
        for word in words:
            _raise(self.content, units(word), weight)
        _raise(self.units, units(text), weight)
        self.clauses.extend(clause_content(text, words))


def _raise(weights: dict[str, float], keys: Iterable[str], weight: float) -> None:
    """Each key at ``weight`` at least (a unit keeps the highest weight of any message it appears in)."""
    get = weights.get
    for key in keys:
        if get(key, 0.0) < weight:
            weights[key] = weight


@functools.lru_cache(maxsize=1024)
def clause_content(text: str, words: tuple[str, ...]) -> tuple[dict[str, float], ...]:
    """Each clause's content units: the message's content words that occur in it (jieba cuts at punctuation
    anyway, so segmenting each clause again would find the same words). Cached, as a turn comes back as
    context: callers must not change the maps."""
    out = []
    for clause in CLAUSE_BREAK.split(fold(text)):
        found = {u: 1.0 for w in words if w in clause for u in units(w)}
        if found:
            out.append(found)
    return tuple(out)


def build_query(text: str, tokenize: Tokenize, *, earlier: Sequence[str] = (), reply: str | None = None,
                distinctive: Callable[[str], bool] | None = None) -> Query:
    """``earlier``: the user's previous turns, oldest first; ``reply``: the companion's last reply;
    ``distinctive``: which of the turn's words name a topic by themselves (None: none does)."""
    words = tokenize(text)
    anchors = {w for w in words if distinctive(w)} if distinctive is not None else set()
    alone = Query(anchors=anchors)
    alone.add(text, words, CURRENT_WEIGHT)
    recent = [t for t in earlier if t.strip()][-EARLIER_USER_TURNS:]
    if not recent and not (reply and reply.strip()):
        return alone
    # Only the turn's own words anchor: the window's turns are where the memory may have been told.
    query = Query(words=dict(alone.words), units=dict(alone.units), content=dict(alone.content),
                  clauses=list(alone.clauses), anchors=anchors, turn=alone)
    for distance, said in enumerate(reversed(recent), start=1):
        query.add(said, tokenize(said), CURRENT_WEIGHT / (1 + distance))
    if reply and reply.strip():
        query.add(reply, tokenize(reply), REPLY_WEIGHT)
    return query
