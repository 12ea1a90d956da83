"""Follow-ups: a told event that has ended is asked about in the next conversation's first reply, as a cue
(not a fact), at most twice, never in a group; a yearly date is remembered on its day. Pure rules in tables,
then through the chat service."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from companion.core import followup_rules as followups
from companion.core import rules
from companion.core.models import Memory, MemoryDraft, Scope, Status, Validity, When
from tests.scripted import ScriptedBrain, reference_data
from tests.support import Rig

TZ = ZoneInfo("Asia/Shanghai")
TODAY = date(2026, 12, 14)
NOW = datetime(2026, 12, 14, 2, 0, tzinfo=UTC)
ME = Scope(880)


def memory(handle: int, when: When | None, importance: float = 70, extra: dict[str, object] | None = None) -> Memory:
    draft = MemoryDraft(event=f"事件{handle}", keywords=["事件"], importance=importance, validity=Validity.DAYS_30,
                        happens=when)
    return replace(rules.new_memory(draft, handle, NOW - timedelta(days=20)), **(extra or {}))  # type: ignore[arg-type]


@pytest.mark.parametrize(("when", "extra", "open_"), [
    (When(date(2026, 12, 9), date(2026, 12, 11)), {}, True),  # ended three days ago
    (When(date(2026, 12, 14)), {}, False),  # today: not over yet
    (When(date(2026, 12, 20)), {}, False),  # ahead
    (When(date(2026, 11, 29)), {}, False),  # ended more than 14 days ago
    (When(date(2026, 11, 30)), {}, True),  # exactly 14 days ago
    (None, {}, False),  # a lasting fact
    (When(date(2026, 12, 9)), {"status": Status.ARCHIVED}, False),
    (When(date(2026, 12, 9)), {"last_mentioned_at": datetime(2026, 12, 12, tzinfo=UTC)}, False),  # talked about
    (When(date(2026, 12, 9)), {"last_mentioned_at": datetime(2026, 12, 8, tzinfo=UTC)}, True),  # only before it
])
def test_open_threads(when: When | None, extra: dict[str, object], open_: bool) -> None:
    assert bool(followups.open_threads([memory(1, when, extra=extra)], TODAY, TZ)) is open_


def test_at_most_three_threads_the_most_important_first_and_two_cues_each() -> None:
    ended = When(date(2026, 12, 10))
    found = [memory(h, ended, importance=imp) for h, imp in [(1, 40), (2, 90), (3, 60), (4, 80)]]
    assert [m.id for m in followups.open_threads(found, TODAY, TZ)] == [2, 4, 3]
    assert followups.cue(found, TODAY, TZ, {}) == found[1]
    assert followups.cue(found, TODAY, TZ, {2: 2}) == found[3]
    assert followups.cue(found, TODAY, TZ, {2: 2, 4: 2, 3: 2}) is None  # the fourth is not open


def test_a_birthday_is_cued_on_its_day_first() -> None:
    birthday = memory(7, When(date(1990, 12, 14), yearly=True))
    trip = memory(8, When(date(2026, 12, 10)))
    assert followups.cue([trip, birthday], TODAY, TZ, {}) == birthday
    assert followups.cue([trip, birthday], TODAY + timedelta(days=1), TZ, {}) == trip


async def test_the_next_conversation_asks_how_the_trip_went(rig: Rig) -> None:
    ScriptedBrain().install(rig.llm)
    now = rig.clock()
    trip = When((now - timedelta(days=5)).date(), (now - timedelta(days=3)).date())
    await rig.engine.save_draft(ME, MemoryDraft("去杭州出差三天", ["杭州", "出差"], 70, Validity.DAYS_30,
                                                happens=trip), now)
    await rig.chat.start(ME)
    cues = []
    for _ in range(3):  # three conversations, half a day apart
        await rig.chat.reply(ME, "今天好累啊")
        cues.append("应该已经结束了" in reference_data(rig.llm.chat_requests()[-1]))
        await rig.chat.reply(ME, "晚上想早点睡")
        cues.append("应该已经结束了" in reference_data(rig.llm.chat_requests()[-1]))
        rig.clock.advance(hours=13)  # past what a reply carries as the conversation (12 hours)
    # The first reply of each conversation only, and at most twice without an answer.
    assert cues == [True, False, True, False, False, False]
    block = reference_data(rig.llm.chat_requests()[0])
    assert "去杭州出差三天" in block and "这是提示，不是用户刚说的" in block


async def test_a_groups_memories_are_never_followed_up(rig: Rig) -> None:
    now = rig.clock()
    group = Scope(880, -100123)
    ended = When((now - timedelta(days=3)).date())
    for scope in (ME, group):
        trip = MemoryDraft("去杭州出差", ["杭州"], 70, Validity.DAYS_30, happens=ended)
        await rig.engine.save_draft(scope, trip, now)
    private = await (await rig.engine.open_turn(ME)).context("早上好", now, turn=1, cooldown={}, follow_up={})
    in_group = await (await rig.engine.open_turn(group)).context("早上好", now, turn=1, cooldown={}, follow_up={})
    assert private.followup is not None and in_group.followup is None


# ---- follow-ups written first: the days a thread may go out, and when a message may -----------------


@pytest.mark.parametrize(("when", "extra", "days"), [
    (When(date(2026, 12, 9), date(2026, 12, 11)), {}, (date(2026, 12, 12), date(2026, 12, 25))),
    (When(date(2026, 12, 20)), {}, (date(2026, 12, 21), date(2027, 1, 3))),  # ahead: from the day after
    (When(date(1990, 12, 20), yearly=True), {}, (date(2026, 12, 20), date(2026, 12, 20))),  # its next day
    (When(date(1990, 12, 1), yearly=True), {}, (date(2027, 12, 1), date(2027, 12, 1))),  # this year's passed
    (When(date(1990, 12, 14), yearly=True), {}, (TODAY, TODAY)),  # today
    (None, {}, None),
    (When(date(2026, 12, 9)), {"status": Status.ARCHIVED}, None),
    (When(date(2026, 12, 9)), {"status": Status.SUPERSEDED}, None),
])
def test_thread_days(when: When | None, extra: dict[str, object], days: tuple[date, date] | None) -> None:
    assert followups.thread_days(memory(1, when, extra=extra), TODAY) == days


def local(day: int, hour: int, minute: int = 0) -> datetime:
    """A Shanghai wall-clock time in December 2026, as the UTC moment it is."""
    return datetime(2026, 12, day, hour, minute, tzinfo=TZ).astimezone(UTC)


HOURS = (10, 21)


@pytest.mark.parametrize(("now", "said", "sent", "may"), [
    (local(14, 10, 30), local(12, 20), [], True),
    (local(14, 9, 59), local(12, 20), [], False),  # before the hours
    (local(14, 21, 0), local(12, 20), [], False),  # the end hour is out
    (local(14, 20, 59), None, [], True),  # the user's last message is not known
    (local(14, 10, 30), local(14, 0, 30), [], False),  # the user wrote this local day (00:30)
    (local(14, 10, 30), local(13, 23, 59), [], True),  # ... the evening before is another day
    (local(14, 18, 0), local(12, 20), [local(14, 10, 0)], False),  # one a local day
    (local(14, 10, 0), local(12, 20), [local(13, 20, 0)], True),  # yesterday's, one unanswered
    (local(15, 10, 0), local(12, 20), [local(13, 10, 0), local(14, 10, 0)], False),  # two unanswered in a row
    (local(15, 10, 0), local(14, 12, 0), [local(13, 10, 0), local(14, 10, 0)], True),  # the user answered
])
def test_may_push(now: datetime, said: datetime | None, sent: list[datetime], may: bool) -> None:
    assert followups.may_push(now, TZ, HOURS, said, sent) is may
