"""Pure memory rules: decay, cleanup, the recall rate limit and importance clamping. No DB, no clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest

from companion.core import rules
from companion.core.models import Validity

T0 = datetime(2025, 1, 1, 3, 0, tzinfo=UTC)
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)


# ---- clamp_importance ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (math.nan, 0.0),
        (-5.0, 0.0),
        (-math.inf, 0.0),
        (math.inf, 100.0),
        (1e308, 100.0),
        (100.0001, 100.0),
        (100.0, 100.0),
        (0.0, 0.0),
        (42.5, 42.5),
    ],
)
def test_clamp_importance(value: float, expected: float) -> None:
    assert rules.clamp_importance(value) == expected


# ---- expiry and whole days -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("validity", "expected"),
    [(Validity.PERMANENT, None), (Validity.DAYS_30, T0 + 30 * DAY), (Validity.DAYS_7, T0 + 7 * DAY)],
)
def test_expires_at(validity: Validity, expected: datetime | None) -> None:
    assert rules.expires_at(T0, validity) == expected


@pytest.mark.parametrize(
    ("elapsed", "days"),
    [(-DAY, 0), (timedelta(0), 0), (DAY - timedelta(seconds=1), 0), (DAY, 1), (3 * DAY + 23 * HOUR, 3)],
)
def test_whole_days(elapsed: timedelta, days: int) -> None:
    assert rules.whole_days(T0, T0 + elapsed) == days


# ---- decay -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elapsed", "mentioned", "expected", "anchor_days"),
    [
        (timedelta(0), None, 80.0, 0),
        (DAY - timedelta(seconds=1), None, 80.0, 0),
        (DAY, None, 80 * 0.95, 1),
        (DAY + 23 * HOUR, None, 80 * 0.95, 1),
        (3 * DAY, None, 80 * 0.95**3, 3),
        # An old mention whose seven-day window closed before this interval changes nothing.
        (3 * DAY, T0 - 30 * DAY, 80 * 0.95**3, 3),
        # Mentioned at the anchor: days ending at +1..+7 are slow, the rest normal.
        (3 * DAY, T0, 80 * 0.98**3, 3),
        (10 * DAY, T0, 80 * 0.98**7 * 0.95**3, 10),
        # Mention five days before the anchor: the window ends at +2 days, inclusive.
        (3 * DAY, T0 - 5 * DAY, 80 * 0.98**2 * 0.95, 3),
        # Mentioned in the middle of day 2: days 2 and 3 end inside its window, day 1 does not.
        (3 * DAY, T0 + DAY + 12 * HOUR, 80 * 0.95 * 0.98**2, 3),
    ],
)
def test_decay_table(
    elapsed: timedelta, mentioned: datetime | None, expected: float, anchor_days: int
) -> None:
    value, anchor = rules.decay(80.0, Validity.DAYS_30, T0, mentioned, T0 + elapsed)
    assert value == pytest.approx(expected, rel=1e-12)
    assert anchor == T0 + anchor_days * DAY


@pytest.mark.parametrize("elapsed", [timedelta(0), DAY, 400 * DAY])
@pytest.mark.parametrize("mentioned", [None, T0 + DAY])
def test_permanent_never_decays(elapsed: timedelta, mentioned: datetime | None) -> None:
    assert rules.decay(80.0, Validity.PERMANENT, T0, mentioned, T0 + elapsed) == (80.0, T0)


@pytest.mark.parametrize("validity", [Validity.DAYS_7, Validity.DAYS_30])
def test_decay_is_the_same_for_both_limited_validities(validity: Validity) -> None:
    value, _ = rules.decay(50.0, validity, T0, None, T0 + 2 * DAY)
    assert value == pytest.approx(50 * 0.95**2)


@pytest.mark.parametrize("later", [timedelta(0), timedelta(minutes=1), 23 * HOUR])
def test_second_run_the_same_day_changes_nothing(later: timedelta) -> None:
    now = T0 + 2 * DAY + 5 * timedelta(minutes=1)
    first, anchor = rules.decay(80.0, Validity.DAYS_30, T0, T0 - DAY, now)
    second, anchor2 = rules.decay(first, Validity.DAYS_30, anchor, T0 - DAY, now + later)
    assert (second, anchor2) == (first, anchor)
    assert first < 80.0


def _daily_runs(importance: float, mentioned: datetime | None, days: int, run_offset: timedelta) -> float:
    """What the nightly job produces: one run per day, each seeing only mentions made before it."""
    anchor = T0
    for day in range(1, days + 1):
        now = T0 + day * DAY + run_offset
        seen = mentioned if mentioned is not None and mentioned <= now else None
        importance, anchor = rules.decay(importance, Validity.DAYS_30, anchor, seen, now)
    return importance


@pytest.mark.parametrize("days", [1, 2, 5, 12, 30])
@pytest.mark.parametrize(
    "mentioned",
    [
        None,
        T0 - 3 * DAY,  # window still open at the start of the interval
        T0,
        T0 + 3 * DAY + 12 * HOUR,  # a mention inside the downtime interval
        T0 + 4 * DAY,  # exactly at a day's end
        T0 + 11 * DAY + HOUR,
    ],
)
@pytest.mark.parametrize("run_offset", [timedelta(0), timedelta(minutes=7)])
def test_catch_up_equals_daily_runs(days: int, mentioned: datetime | None, run_offset: timedelta) -> None:
    now = T0 + days * DAY + run_offset
    seen = mentioned if mentioned is not None and mentioned <= now else None
    caught_up, anchor = rules.decay(80.0, Validity.DAYS_30, T0, seen, now)
    assert caught_up == pytest.approx(_daily_runs(80.0, mentioned, days, run_offset), rel=1e-12)
    assert anchor == T0 + days * DAY


def test_catch_up_with_mention_inside_interval_is_slower_than_without() -> None:
    quiet, _ = rules.decay(80.0, Validity.DAYS_30, T0, None, T0 + 10 * DAY)
    mentioned, _ = rules.decay(80.0, Validity.DAYS_30, T0, T0 + 3 * DAY + 12 * HOUR, T0 + 10 * DAY)
    # Days 4..10 end within the seven days after the mention.
    assert mentioned == pytest.approx(80 * 0.95**3 * 0.98**7)
    assert mentioned > quiet


# ---- removal_reason --------------------------------------------------------------------------------

NOW = T0 + 40 * DAY


@pytest.mark.parametrize(
    ("importance", "validity", "expires", "mentioned", "expected"),
    [
        (9.99, Validity.DAYS_30, NOW + DAY, None, "faded"),
        (0.0, Validity.DAYS_7, NOW + DAY, NOW, "faded"),
        (10.0, Validity.DAYS_30, NOW + DAY, None, None),
        (50.0, Validity.DAYS_30, NOW - timedelta(seconds=1), None, "expired"),
        (50.0, Validity.DAYS_7, NOW, None, "expired"),  # expiring exactly now counts as expired
        (50.0, Validity.DAYS_30, NOW - DAY, NOW - 6 * DAY, None),  # mentioned within the last 7 days
        (50.0, Validity.DAYS_30, NOW - DAY, NOW - 7 * DAY, "expired"),
        (50.0, Validity.DAYS_30, NOW - DAY, NOW - 30 * DAY, "expired"),
        (50.0, Validity.DAYS_30, None, None, None),
        (0.0, Validity.PERMANENT, None, None, None),
        (3.0, Validity.PERMANENT, NOW - 100 * DAY, NOW - 100 * DAY, None),
    ],
)
def test_removal_reason(
    importance: float, validity: Validity, expires: datetime | None, mentioned: datetime | None,
    expected: str | None,
) -> None:
    assert rules.removal_reason(importance, validity, expires, mentioned, NOW) == expected


# ---- recall_allowed --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recent", "rate", "expected"),
    [
        ([], 0.2, True),
        ([True], 0.2, True),
        ([True, True], 0.2, False),
        ([True, False, True, False], 0.2, False),
        ([True, True] + [False] * 10, 0.2, True),  # both left the ten-turn window
        ([True, True] + [False] * 8, 0.2, False),  # both still inside it
        ([], 0.0, False),
        ([True] * 9, 1.0, True),
        ([True] * 10, 1.0, False),
    ],
)
def test_recall_allowed_table(recent: list[bool], rate: float, expected: bool) -> None:
    assert rules.recall_allowed(recent, rate, window=10) is expected


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.3, 0.5])
def test_at_most_the_rate_of_turns_carry_a_memory(rate: float) -> None:
    carried: list[bool] = []
    for _ in range(100):  # every turn would recall something
        carried.append(rules.recall_allowed(carried[-10:], rate, window=10))
    assert sum(carried) <= round(rate * 100)
    assert sum(carried) >= 0.9 * rate * 100  # the limit throttles, it does not starve
    assert max(sum(carried[i : i + 10]) for i in range(91)) <= round(rate * 10)


def test_default_rate_gives_at_most_twenty_of_a_hundred_turns() -> None:
    carried: list[bool] = []
    for _ in range(100):
        carried.append(rules.recall_allowed(carried, 0.2))
    assert 15 <= sum(carried) <= 20


T_TOLD = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(("importance", "validity", "decayed_days", "told"), [
    (60.0, Validity.DAYS_30, 0, 60.0),
    (60.0 * 0.95**5, Validity.DAYS_30, 5, 60.0),  # undone exactly for plain decay
    (90.0, Validity.PERMANENT, 40, 90.0),  # permanent memories never decayed
    (90.0 * 0.95**3, Validity.DAYS_7, 3, 90.0),
    (99.0, Validity.DAYS_30, 4, 100.0),  # a retelling's higher importance after decay: capped
])
def test_told_importance(importance: float, validity: Validity, decayed_days: int, told: float) -> None:
    anchor = T_TOLD + decayed_days * DAY + timedelta(hours=3)  # a decay anchor moves by whole days
    assert rules.told_importance(importance, validity, T_TOLD, anchor) == pytest.approx(told)
