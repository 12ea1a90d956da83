"""Pure tier rules as tables: review and reminder times, priority, suggestions, moves, what a reply may
know, and eviction order."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import pytest

from companion.core import rules, tiers
from companion.core.models import Memory, MemoryType, Origin, Status, Tier, Validity, When
from companion.core.tiers import Action

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def mem(mid: int, tier: Tier = Tier.SHORT, importance: float = 60.0, **extra: object) -> Memory:
    base = Memory(
        id=mid, event=f"事{mid}", keywords=["词"], importance=importance, created_at=NOW - mid * DAY,
        validity=tiers.VALIDITY_OF[tier], last_mentioned_at=None, updated_at=NOW, expires_at=None,
        type=MemoryType.FACT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=NOW, tier=tier,
    )
    return replace(base, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(("tier", "period", "lead"), [
    (Tier.SHORT, 7 * DAY, timedelta(hours=9)),
    (Tier.MEDIUM, 30 * DAY, DAY),
    (Tier.LONG, 90 * DAY, 7 * DAY),
])
def test_review_and_reminder(tier: Tier, period: timedelta, lead: timedelta) -> None:
    assert tiers.review_at(tier, NOW) == NOW + period
    memory = mem(1, tier, review_at=NOW + period)
    assert tiers.remind_at(memory) == NOW + period - lead
    assert not tiers.is_due(memory, NOW + period - lead - timedelta(seconds=1))
    assert tiers.is_due(memory, NOW + period - lead)
    assert not tiers.is_due(replace(memory, pinned=True), NOW + period)
    assert not tiers.is_due(replace(memory, status=Status.ARCHIVED), NOW + period)
    assert not tiers.is_due(replace(memory, review_at=None), NOW + 1000 * DAY)


@pytest.mark.parametrize(("importance", "tier", "expected"), [
    (0, Tier.SHORT, 0), (24.9, Tier.SHORT, 0), (25, Tier.SHORT, 1), (80, Tier.SHORT, 3), (100, Tier.SHORT, 4),
    (50, Tier.MEDIUM, 3), (100, Tier.MEDIUM, 5), (10, Tier.LONG, 2), (100, Tier.LONG, 5), (-5, Tier.SHORT, 0),
])
def test_priority(importance: float, tier: Tier, expected: int) -> None:
    assert tiers.priority(importance, tier) == expected


@pytest.mark.parametrize(("mentions", "accesses", "last_used", "tier", "action"), [
    (2, 0, NOW - DAY, Tier.SHORT, Action.PROMOTE),
    (1, 1, NOW - DAY, Tier.MEDIUM, Action.PROMOTE),
    (5, 0, NOW - DAY, Tier.LONG, Action.KEEP),  # nothing above long-term
    (0, 0, None, Tier.SHORT, Action.ARCHIVE),
    (1, 0, NOW - 40 * DAY, Tier.MEDIUM, Action.ARCHIVE),  # used, but not in this period
    (1, 0, NOW - 3 * DAY, Tier.SHORT, Action.KEEP),
])
def test_suggestions(mentions: int, accesses: int, last_used: datetime | None, tier: Tier, action: Action) -> None:
    memory = mem(1, tier, mention_count=mentions, access_count=accesses, last_mentioned_at=last_used)
    suggestion = tiers.suggest(memory, NOW)
    assert suggestion.action is action
    assert suggestion.reason


P, D30, D7 = Validity.PERMANENT, Validity.DAYS_30, Validity.DAYS_7


@pytest.mark.parametrize(("start", "validity", "target", "moved_validity", "expires_in"), [
    # Up: the life is kept or lengthened, never shortened.
    (Tier.SHORT, D7, Tier.MEDIUM, D30, 30 * DAY),
    (Tier.SHORT, P, Tier.MEDIUM, P, None),  # a permanent short-term memory promoted stays permanent
    (Tier.SHORT, D30, Tier.MEDIUM, D30, 30 * DAY),
    (Tier.SHORT, P, Tier.LONG, P, None),
    (Tier.MEDIUM, D30, Tier.LONG, P, None),
    (Tier.MEDIUM, P, Tier.LONG, P, None),
    (Tier.LONG, P, Tier.LONG, P, None),
    (Tier.SHORT, D30, Tier.SHORT, D30, 30 * DAY),  # sideways: renewed from now, never shorter
    # Down (only the user moves a memory down): the lower tier's life from now.
    (Tier.LONG, P, Tier.MEDIUM, D30, 30 * DAY),
    (Tier.LONG, P, Tier.SHORT, D7, 7 * DAY),
    (Tier.MEDIUM, P, Tier.SHORT, D7, 7 * DAY),
    (Tier.MEDIUM, D30, Tier.SHORT, D7, 7 * DAY),
])
def test_a_move_never_shortens_a_life_unless_moved_down(
    start: Tier, validity: Validity, target: Tier, moved_validity: Validity, expires_in: timedelta | None
) -> None:
    memory = mem(1, start, validity=validity, expires_at=None if validity is P else NOW + DAY * 3)
    moved = tiers.move_to_tier(memory, target, NOW)
    assert (moved.tier, moved.validity) == (target, moved_validity)
    assert moved.review_at == NOW + rules.REVIEW_PERIOD[target]
    assert moved.expires_at == (None if expires_in is None else NOW + expires_in)


def test_moving_up_keeps_a_later_expiry() -> None:
    memory = mem(1, Tier.SHORT, validity=D30, expires_at=NOW + 40 * DAY)
    assert tiers.move_to_tier(memory, Tier.MEDIUM, NOW).expires_at == NOW + 40 * DAY


@pytest.mark.parametrize(("mtype", "importance", "core", "validity", "tier"), [
    # Explicit saves (no validity given: the tier decides it).
    (MemoryType.INSTRUCTION, 30, False, None, Tier.LONG),
    (MemoryType.PREFERENCE, 70, False, None, Tier.LONG),
    (MemoryType.PREFERENCE, 40, False, None, Tier.SHORT),
    (MemoryType.EVENT, 40, True, None, Tier.LONG),
    (MemoryType.EVENT, 60, False, None, Tier.MEDIUM),
    (MemoryType.FACT, 20, False, None, Tier.MEDIUM),
    (MemoryType.EVENT, 20, False, None, Tier.SHORT),
    # Extraction: the same judgement, with the model's validity saying how long it matters.
    (MemoryType.FACT, 90, False, P, Tier.LONG),  # 对花生过敏: a permanent health fact is core
    (MemoryType.PREFERENCE, 70, False, P, Tier.LONG),
    (MemoryType.PREFERENCE, 50, False, P, Tier.MEDIUM),
    (MemoryType.FACT, 40, False, P, Tier.MEDIUM),
    (MemoryType.INSTRUCTION, 60, False, P, Tier.LONG),
    (MemoryType.INSTRUCTION, 60, False, D7, Tier.SHORT),  # "这周别提考试": applies, but only this week
    (MemoryType.EVENT, 95, False, P, Tier.MEDIUM),  # an event is never core by itself
    (MemoryType.EVENT, 85, False, D30, Tier.MEDIUM),  # 感冒发烧: important, for weeks
    (MemoryType.EVENT, 85, False, D7, Tier.SHORT),  # a 7-day note stays short-term
    (MemoryType.FACT, 90, False, D7, Tier.SHORT),
    (MemoryType.EVENT, 20, False, D30, Tier.SHORT),
])
def test_initial_tier(mtype: MemoryType, importance: float, core: bool, validity: Validity | None, tier: Tier) -> None:
    assert tiers.initial_tier(mtype, importance, core, validity) is tier


def test_always_loaded() -> None:
    long = [mem(i, Tier.LONG, importance=float(i)) for i in range(1, 13)]
    medium = [mem(20 + i, Tier.MEDIUM, importance=float(i * 10)) for i in range(1, 8)]
    short = [mem(40 + i, Tier.SHORT) for i in range(1, 5)]
    rule = mem(60, Tier.MEDIUM, type=MemoryType.INSTRUCTION)
    archived = mem(61, Tier.MEDIUM, importance=99.0, status=Status.ARCHIVED)
    everything = [*long, *medium, *short, rule, archived]
    loaded = [m.id for m in tiers.always_loaded(everything)]
    # every long-term one, the 5 medium-term of highest priority, the 2 newest short-term
    assert loaded == [*range(12, 0, -1), 27, 26, 25, 24, 23, 41, 42]
    assert tiers.instructions(everything) == [rule]


def test_eviction_order_and_protection() -> None:
    memories = [
        mem(1, importance=90.0, expires_at=NOW - DAY),  # expired goes first, however important
        mem(2, importance=20.0),
        mem(3, importance=20.0, last_accessed_at=NOW - DAY),  # same importance, used more recently
        mem(4, importance=5.0, pinned=True),  # pinned: never
        mem(5, Tier.LONG, importance=1.0),  # long-term: never
        mem(6, importance=50.0),
        mem(7, importance=20.0, created_at=NOW - 100 * DAY),  # oldest of the unused 20s
    ]
    assert [m.id for m in tiers.eviction_order(memories, NOW)] == [1, 7, 2, 3, 6]
    assert [m.id for m in tiers.to_evict(memories, cap=5, now=NOW)] == [1, 7]
    assert tiers.to_evict(memories, cap=7, now=NOW) == []
    assert [m.id for m in tiers.to_evict(memories, cap=0, now=NOW)] == [1, 7, 2, 3, 6]


TODAY = NOW.date()  # 2025-12-23
TRIP = When(on=date(2025, 12, 30), ends=date(2026, 1, 2))


@pytest.mark.parametrize(("happens", "tier", "mentions", "action", "reason"), [
    (When(on=date(2025, 12, 20)), Tier.SHORT, 5, Action.ARCHIVE, "这件事已经过去了"),  # over, however used
    (When(on=date(2025, 12, 10), ends=TODAY), Tier.MEDIUM, 0, Action.KEEP, "日子还没到"),  # its last day: ahead
    (When(on=date(2000, 5, 20), yearly=True), Tier.MEDIUM, 0, Action.PROMOTE, "每年都有的日子"),
    (When(on=date(2000, 5, 20), yearly=True), Tier.LONG, 0, Action.KEEP, "每年都有的日子"),
])
def test_a_date_decides_the_suggestion(happens: When, tier: Tier, mentions: int, action: Action, reason: str) -> None:
    memory = mem(1, tier, mention_count=mentions, last_mentioned_at=NOW - DAY, happens=happens)
    assert tiers.suggest(memory, NOW) == tiers.Suggestion(action, reason)


@pytest.mark.parametrize(("happens", "due"), [
    (None, True),
    (TRIP, False),  # the trip is not asked about before it happens
    (When(on=date(2025, 12, 22)), True),  # yesterday's: asked, and archiving is suggested
    (When(on=TODAY), False),
    (When(on=date(2000, 12, 30), yearly=True), True),  # a yearly day is always ahead; it is reviewed as usual
])
def test_an_event_still_ahead_is_not_due_for_review(happens: When | None, due: bool) -> None:
    memory = mem(1, Tier.SHORT, review_at=NOW - DAY, happens=happens)
    assert tiers.is_due(memory, NOW) is due


def test_an_event_still_ahead_is_evicted_after_everything_else_of_its_kind() -> None:
    memories = [
        mem(1, importance=10.0, happens=TRIP),  # least important, but its day is ahead
        mem(2, importance=40.0),
        mem(3, importance=30.0, happens=When(on=date(2025, 12, 1))),  # a past event is like any other
        mem(4, importance=80.0, happens=TRIP, expires_at=NOW - DAY),  # expired still goes first
    ]
    assert [m.id for m in tiers.eviction_order(memories, NOW)] == [4, 3, 2, 1]
