"""Who the other-user turns are asked of: a different person, not a copy of the asker."""

from __future__ import annotations

import pytest

from bench.recall import partners


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
