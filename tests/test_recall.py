"""Keyword recall: matching both ways, the filters a turn applies, ranking, and mention detection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from companion.models import Memory, MemoryType, Source, Validity
from companion.recall import RecallFilter, ScopeIndex, mentions

NOW = datetime(2025, 12, 23, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
OPEN = RecallFilter(limit=None, min_importance=0.0, min_match=0.0, cooldown_turns=0)


def mem(
    mid: int, keywords: list[str], importance: float = 80.0, *, age: timedelta = DAY,
    mentioned: datetime | None = None, expires: datetime | None = None, event: str = "",
) -> Memory:
    created = NOW - age
    return Memory(
        id=mid, event=event or f"事件{mid}", keywords=keywords, importance=importance, created_at=created,
        validity=Validity.DAYS_30, last_mentioned_at=mentioned, updated_at=created,
        expires_at=expires if expires is not None else NOW + 30 * DAY, type=MemoryType.EVENT,
        source=Source.EXTRACTION, mention_count=0, last_decay_at=created,
    )


def ids(index: ScopeIndex, query: list[str], rules: RecallFilter = OPEN, now: datetime = NOW) -> list[int]:
    return [r.memory.id for r in index.rank(query, now, rules)]


# ---- matching --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "stored"),
    [
        ("奶茶", "珍珠奶茶"),  # the turn's word is inside the memory's
        ("感冒药", "感冒"),  # the memory's word is inside the turn's
        ("珍珠奶茶", "奶茶"),
        ("面试", "面试"),
        ("coffee", "coffeehouse"),
        ("hikes", "hike"),
    ],
)
def test_containment_matches_both_ways(query: str, stored: str) -> None:
    index = ScopeIndex([mem(1, [stored]), mem(2, ["上班"])])
    found = index.matches([query])
    assert list(found) == [1]
    assert 0.6 <= found[1] <= 1.0


def test_exact_match_is_stronger_than_containment() -> None:
    index = ScopeIndex([mem(1, ["奶茶"]), mem(2, ["珍珠奶茶"])])
    found = index.matches(["奶茶"])
    assert found[1] == pytest.approx(1.0)
    assert 0 < found[2] < found[1]


def test_longer_shared_part_matches_better() -> None:
    index = ScopeIndex([mem(1, ["感冒"]), mem(2, ["感冒"])])
    close = ScopeIndex([mem(1, ["感冒药"])]).matches(["感冒"])[1]
    far = ScopeIndex([mem(1, ["感冒药膏贴"])]).matches(["感冒"])[1]
    assert close > far
    assert index.matches(["感冒"]) == {1: pytest.approx(1.0), 2: pytest.approx(1.0)}


@pytest.mark.parametrize(
    "query",
    [
        ["咖啡"],
        ["茶"],  # one character never matches
        ["奶茶店"],  # shares "奶茶" with the memory, but neither word contains the other
        ["art"],  # Latin words shorter than four letters are not stems
        [],
    ],
)
def test_unrelated_text_finds_nothing(query: list[str]) -> None:
    index = ScopeIndex([mem(1, ["珍珠奶茶"]), mem(2, ["party"])])
    assert index.matches(query) == {}
    assert ids(index, query) == []


def test_empty_index_finds_nothing() -> None:
    assert ScopeIndex([]).matches(["奶茶"]) == {}


def test_a_query_covering_more_of_the_memory_matches_better() -> None:
    index = ScopeIndex([mem(1, ["感冒", "发烧"]), mem(2, ["旅行"])])
    both = index.matches(["感冒", "发烧"])[1]
    one = index.matches(["感冒"])[1]
    assert both == pytest.approx(1.0)
    assert one < both


def test_unmatched_query_words_weaken_the_match() -> None:
    index = ScopeIndex([mem(1, ["感冒"]), mem(2, ["旅行"])])
    assert index.matches(["感冒", "天气", "下雨"])[1] < index.matches(["感冒"])[1]


# ---- filters ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("importance", "found"), [(49.9, False), (50.0, True), (90.0, True)])
def test_importance_floor(importance: float, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"], importance)])
    rules = RecallFilter(limit=None, min_importance=50.0, min_match=0.0)
    assert ids(index, ["奶茶"], rules) == ([1] if found else [])


@pytest.mark.parametrize(("expires", "found"), [(NOW - timedelta(seconds=1), False), (NOW, False),
                                                 (NOW + timedelta(seconds=1), True)])
def test_expired_memories_are_skipped(expires: datetime, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"], expires=expires)])
    assert ids(index, ["奶茶"]) == ([1] if found else [])


def test_min_match_filters_weak_matches() -> None:
    index = ScopeIndex([mem(1, ["感冒", "发烧", "头疼", "咳嗽"]), mem(2, ["感冒"])])
    rules = RecallFilter(limit=None, min_importance=0.0, min_match=0.8)
    assert ids(index, ["感冒"], rules) == [2]


@pytest.mark.parametrize(("turn", "found"), [(10, False), (11, False), (14, False), (15, True), (40, True)])
def test_cooldown_blocks_a_memory_for_five_turns(turn: int, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"]), mem(2, ["奶茶", "珍珠"])])
    rules = RecallFilter(limit=None, min_importance=0.0, cooldown_turns=5, turn=turn, cooldown={1: 10})
    assert (1 in ids(index, ["奶茶"], rules)) is found
    assert 2 in ids(index, ["奶茶"], rules)  # only the recalled memory cools down


@pytest.mark.parametrize("cooldown_turns", [0, -1])
def test_cooldown_off(cooldown_turns: int) -> None:
    index = ScopeIndex([mem(1, ["奶茶"])])
    rules = RecallFilter(limit=None, min_importance=0.0, cooldown_turns=cooldown_turns, turn=10, cooldown={1: 10})
    assert ids(index, ["奶茶"], rules) == [1]


@pytest.mark.parametrize(("limit", "count"), [(None, 4), (0, 0), (1, 1), (2, 2), (10, 4)])
def test_limit(limit: int | None, count: int) -> None:
    index = ScopeIndex([mem(i, ["奶茶"], 60 + i) for i in range(1, 5)])
    found = ids(index, ["奶茶"], RecallFilter(limit=limit, min_importance=0.0))
    assert found == [4, 3, 2, 1][:count]


def test_recall_filter_defaults() -> None:
    rules = RecallFilter()
    assert (rules.limit, rules.min_importance, rules.min_match, rules.cooldown_turns) == (2, 50.0, 0.34, 5)


# ---- ranking ---------------------------------------------------------------------------------------


def test_better_match_ranks_first() -> None:
    index = ScopeIndex([mem(1, ["珍珠奶茶"], 80), mem(2, ["奶茶"], 80)])
    assert ids(index, ["奶茶"]) == [2, 1]


def test_better_match_beats_higher_importance() -> None:
    index = ScopeIndex([mem(1, ["感冒", "发烧", "头疼"], 100), mem(2, ["感冒"], 60)])
    assert ids(index, ["感冒"]) == [2, 1]


def test_equal_match_ranks_by_importance() -> None:
    index = ScopeIndex([mem(1, ["奶茶"], 60), mem(2, ["奶茶"], 90), mem(3, ["奶茶"], 75)])
    assert ids(index, ["奶茶"]) == [2, 3, 1]


def test_equal_match_and_importance_ranks_by_recency() -> None:
    index = ScopeIndex([
        mem(1, ["奶茶"], 70, age=2 * DAY),
        mem(2, ["奶茶"], 70, age=60 * DAY),
        mem(3, ["奶茶"], 70, age=60 * DAY, mentioned=NOW - DAY / 2),  # old, but just mentioned
    ])
    assert ids(index, ["奶茶"]) == [3, 1, 2]


def test_recalled_carries_its_score_and_match() -> None:
    index = ScopeIndex([mem(1, ["奶茶"], 100, age=timedelta(0))])
    [hit] = index.rank(["奶茶"], NOW, OPEN)
    assert hit.match == pytest.approx(1.0)
    assert hit.score == pytest.approx(1.0)  # perfect match, importance and freshness


# ---- mentions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "keywords", "expected"),
    [
        ("你的感冒好点了吗？", ["感冒", "发烧"], True),
        ("今天还发烧吗", ["感冒", "发烧"], True),
        ("Still drinking COFFEE?", ["coffee"], True),
        ("今天天气不错", ["感冒", "发烧"], False),
        ("猫咪还好吗", ["猫"], False),  # one-character keywords are too ambiguous to count
        ("", ["感冒"], False),
        ("感冒", [], False),
    ],
)
def test_mentions(reply: str, keywords: list[str], expected: bool) -> None:
    assert mentions(reply, mem(1, keywords)) is expected
