"""Who the other-user turns are asked of: a different person, not a copy of the asker."""

from __future__ import annotations

import pytest

from bench.recall import names_the_same_thing, partners


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        # Four distinct people: the user half the list away.
        ({"a": {"1"}, "b": {"2"}, "c": {"3"}, "d": {"4"}}, {"a": "c", "b": "d", "c": "a", "d": "b"}),
        # "c" is "a" again (a shared memory text): a's questions go to the next user on, "d".
        ({"a": {"x"}, "b": {"2"}, "c": {"x"}, "d": {"4"}}, {"a": "d", "b": "d", "c": "b", "d": "b"}),
        # Everyone shares text "p" (padding held by at least 3 users): it does not count.
        ({"a": {"p", "1"}, "b": {"p", "2"}, "c": {"p", "3"}, "d": {"p", "4"}},
         {"a": "c", "b": "d", "c": "a", "d": "b"}),
    ],
)
def test_partner_is_a_different_person(texts: dict[str, set[str]], expected: dict[str, str]) -> None:
    assert partners(list(texts), texts) == expected


def test_no_partner_for_a_single_user_and_fallback_when_all_share() -> None:
    assert partners(["a"], {"a": {"1"}}) == {}
    same = {"a": {"x"}, "b": {"x"}}
    assert partners(["a", "b"], same) == {"a": "b", "b": "a"}


ASKED = "金融科技精英论坛的主要内容是什么？"
GOLD = "金融科技精英论坛的地点是北京。"


@pytest.mark.parametrize(
    ("question", "gold", "other", "expected"),
    [
        # The other user's memory names the event the question and its gold memory name.
        (ASKED, [GOLD], ["金融科技精英论坛的持续时间是七天。"], True),
        # Same kind of question, a different event there.
        (ASKED, [GOLD], ["音乐光影之旅的持续时间是四个周。"], False),
        # Four characters the question shares with the other memory but not with its gold: no name of its thing.
        ("我喜欢的家电是什么来着？", ["家里用的是美的电饭煲"], ["我喜欢的家电是什么"], False),
        ("how long was the trip?", ["the trip took a week"], ["the trip took a week"], False),
    ],
)
def test_names_the_same_thing(question: str, gold: list[str], other: list[str], expected: bool) -> None:
    assert names_the_same_thing(question, gold, other) is expected
