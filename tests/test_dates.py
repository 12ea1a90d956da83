"""Chinese date words read against the day they were said, the stored form, and how long a dated memory
lives. Pure: ``today`` is an argument. 2026-12-04 is a Friday."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from companion.core import dates, rules
from companion.core.models import MemoryDraft, Validity, When

FRI = date(2026, 12, 4)


def W(on: date, ends: date | None = None, at: time | None = None, yearly: bool = False) -> When:
    return When(on=on, ends=ends, at=at, yearly=yearly)


def d(month: int, day: int, year: int = 2026) -> date:
    return date(year, month, day)


@pytest.mark.parametrize(("text", "words", "when"), [
    # Days named from today.
    ("今天去看牙", "12月4日（周五）去看牙", W(FRI)),
    ("明天要干嘛", "12月5日（周六）要干嘛", W(d(12, 5))),
    ("后天去医院复查", "12月6日（周日）去医院复查", W(d(12, 6))),
    ("大后天考试", "12月7日（周一）考试", W(d(12, 7))),
    ("昨天感冒了", "12月3日（周四）感冒了", W(d(12, 3))),
    ("过两天去看牙", "12月6日（周日）去看牙", W(d(12, 6))),
    ("过几天搬家", "12月7日（周一）搬家", W(d(12, 7))),
    # Weekdays: a bare one is the next such day (today when it is one), 这周/下周/上周 the week's.
    ("周日去超市", "12月6日（周日）去超市", W(d(12, 6))),
    ("礼拜五聚餐", "12月4日（周五）聚餐", W(FRI)),
    ("星期二交报告", "12月8日（周二）交报告", W(d(12, 8))),
    ("这周三去了上海", "12月2日（周三）去了上海", W(d(12, 2))),
    ("下周三我要去杭州出差", "12月9日（周三）我要去杭州出差", W(d(12, 9))),
    ("下下周一开学", "12月14日（周一）开学", W(d(12, 14))),
    ("上周三去了上海", "11月25日（周三）去了上海", W(d(11, 25))),
    ("这周末去爬山", "12月5日-6日去爬山", W(d(12, 5), d(12, 6))),
    ("下周末回老家", "12月12日-13日回老家", W(d(12, 12), d(12, 13))),
    # Spans: a range, a duration after the start, a week, a month.
    ("下周三我要去杭州出差三天", "12月9日（周三）我要去杭州出差三天", W(d(12, 9), d(12, 11))),
    ("明天去北京玩两天", "12月5日（周六）去北京玩两天", W(d(12, 5), d(12, 6))),
    ("周三到周五在上海开会", "12月9日-11日在上海开会", W(d(12, 9), d(12, 11))),
    ("周五到下周一休假", "12月4日-7日休假", W(FRI, d(12, 7))),
    ("9号到11号在北京", "12月9日-11日在北京", W(d(12, 9), d(12, 11))),
    ("12月9日-11日去杭州", "12月9日-11日去杭州", W(d(12, 9), d(12, 11))),
    ("下周要考试", "12月7日-13日要考试", W(d(12, 7), d(12, 13))),
    ("下个月要考雅思", "1月要考雅思", W(d(1, 1, 2027), d(1, 31, 2027))),
    ("月底交报告", "12月29日-31日交报告", W(d(12, 29), d(12, 31))),
    # Dates: the year nearest to today; absolute dates stay in the words.
    ("12月9号去杭州", "12月9号去杭州", W(d(12, 9))),
    ("1月3号回老家", "1月3号回老家", W(d(1, 3, 2027))),
    ("十二月二十号聚会", "十二月二十号聚会", W(d(12, 20))),
    ("下个月15号考雅思", "1月15日（周五）考雅思", W(d(1, 15, 2027))),
    ("明年3月1日入职", "3月1日（周一）入职", W(d(3, 1, 2027))),
    ("2027年2月1日搬家", "2027年2月1日搬家", W(d(2, 1, 2027))),
    ("12号交房租", "12月12日（周六）交房租", W(d(12, 12))),  # a bare day is this month's: it goes stale too
    # A time of day after a day.
    ("明天下午3点半开会", "12月5日（周六）15:30开会", W(d(12, 5), at=time(15, 30))),
    ("周一上午9点面试", "12月7日（周一）09:00面试", W(d(12, 7), at=time(9, 0))),
    # Yearly dates.
    ("我的生日是5月20号", "我的生日是5月20号", W(d(5, 20, 2027), yearly=True)),
    ("我们的纪念日是5月20号", "我们的纪念日是5月20号", W(d(5, 20, 2027), yearly=True)),
    ("每年3月8号给妈妈打电话", "每年3月8号给妈妈打电话", W(d(3, 8, 2027), yearly=True)),
    # Not a day: every week, every month, a building, nothing at all.
    ("每周一不要打扰我", "每周一不要打扰我", None),
    ("每个周末去爬山", "每个周末去爬山", None),
    ("每周一和周二都不要打扰我", "每周一和周二都不要打扰我", None),
    ("喜欢周日去爬山", "喜欢周日去爬山", None),
    ("周末一般都在家", "周末一般都在家", None),
    ("每月15号还房贷", "每月15号还房贷", None),
    ("我住3号楼", "我住3号楼", None),
    ("对花生过敏", "对花生过敏", None),
    ("下午3点开会", "下午3点开会", None),
])
def test_date_words(text: str, words: str, when: When | None) -> None:
    found = dates.resolve(text, FRI)
    assert (found.text, found.when) == (words, when)
    assert not found.impossible


@pytest.mark.parametrize("text", ["2月30号是我的生日", "记住：4月31日交报告", "13月1号", "2月30号"])
def test_a_day_that_does_not_exist_is_not_guessed(text: str) -> None:
    found = dates.resolve(text, FRI)
    assert found.when is None and found.impossible and found.text == text


@pytest.mark.parametrize(("text", "span"), [
    ("我这周哪天练吉他来着", (d(11, 30), d(12, 6))),
    ("下周有什么安排", (d(12, 7), d(12, 13))),
    ("明天要干嘛", (d(12, 5), d(12, 5))),
    ("上次去上海是什么时候", (FRI - timedelta(days=90), FRI)),
    ("最近有什么计划吗", (FRI, FRI + timedelta(days=14))),
    # Time words alone ask nothing.
    ("明天天气不错", None),
    ("下周三我要去杭州出差", None),
    ("今天好累啊", None),
    ("你好呀", None),
    # The time and the question in one clause; a plan word alone asks nothing.
    ("今天天气真是不错。也不知道同事们都在忙些什么", None),
    ("我得提前安排一下其他计划", None),
])
def test_questions_about_time(text: str, span: tuple[date, date] | None) -> None:
    assert dates.question_range(text, FRI) == span


@pytest.mark.parametrize(("when", "text", "shown"), [
    (W(d(12, 9)), "2026-12-09", "12月9日（周三）"),
    (W(d(12, 9), d(12, 11)), "2026-12-09/2026-12-11", "12月9日-11日"),
    (W(d(12, 30), d(1, 2, 2027)), "2026-12-30/2027-01-02", "12月30日-1月2日"),
    (W(d(12, 9), at=time(14, 0)), "2026-12-09T14:00", "12月9日（周三）14:00"),
    (W(d(5, 20), yearly=True), "R/2026-05-20", "每年5月20日"),
    (W(d(2, 1), d(2, 28)), "2026-02-01/2026-02-28", "2月"),
])
def test_stored_and_shown(when: When, text: str, shown: str) -> None:
    assert dates.to_text(when) == text
    assert dates.from_text(text) == when
    assert when.describe() == shown


@pytest.mark.parametrize("text", ["", "  ", "tomorrow", "2026-02-30", "R/", "2026-12-09/junk", None, 5])
def test_an_unreadable_stored_date_is_no_date(text: object) -> None:
    assert dates.from_text(text) is None


@given(st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 1, 1)),
       st.integers(min_value=0, max_value=40), st.booleans())
def test_stored_form_round_trips(on: date, span: int, yearly: bool) -> None:
    when = W(on, None if yearly or not span else on + timedelta(days=span), yearly=yearly)
    assert dates.from_text(dates.to_text(when)) == when


@pytest.mark.parametrize(("when", "today", "next_day"), [
    (W(d(5, 20, 1990), yearly=True), d(5, 19), d(5, 20)),
    (W(d(5, 20, 1990), yearly=True), d(5, 20), d(5, 20)),
    (W(d(5, 20, 1990), yearly=True), d(5, 21), d(5, 20, 2027)),
    (W(d(2, 29, 2024), yearly=True), d(1, 1, 2027), d(2, 28, 2027)),
    (W(d(2, 29, 2024), yearly=True), d(1, 1, 2028), d(2, 29, 2028)),
    (W(d(12, 9)), d(1, 1, 2030), d(12, 9)),
])
def test_next_occurrence(when: When, today: date, next_day: date) -> None:
    assert dates.next_occurrence(when, today) == next_day


NOW = datetime(2026, 12, 4, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(("validity", "when", "kept", "expires", "anchor"), [
    # No date: the validity's lifetime from the telling, as before.
    (Validity.DAYS_30, None, Validity.DAYS_30, NOW + timedelta(days=30), NOW),
    # A trip ahead: lives until a week after its last day and does not decay before that day is over.
    (Validity.DAYS_7, W(d(12, 9), d(12, 11)), Validity.DAYS_7, datetime(2026, 12, 19, tzinfo=UTC),
     datetime(2026, 12, 12, tzinfo=UTC)),
    (Validity.DAYS_30, W(d(1, 20, 2027)), Validity.DAYS_30, datetime(2027, 1, 28, tzinfo=UTC),
     datetime(2027, 1, 21, tzinfo=UTC)),
    # Something that happened: a week after its last day, whatever the validity said...
    (Validity.DAYS_30, W(d(12, 1)), Validity.DAYS_30, NOW + timedelta(days=7), NOW),
    (Validity.DAYS_30, W(d(12, 3), d(12, 5)), Validity.DAYS_30, datetime(2026, 12, 13, tzinfo=UTC),
     datetime(2026, 12, 6, tzinfo=UTC)),
    # ...but never sooner than a week after it was told ("上个月去了趟上海" is news for a while).
    (Validity.DAYS_30, W(d(11, 1)), Validity.DAYS_30, NOW + timedelta(days=7), NOW),
    # A birthday is lasting; a lasting fact with a day stays lasting.
    (Validity.DAYS_30, W(d(5, 20), yearly=True), Validity.PERMANENT, None, NOW),
    (Validity.PERMANENT, W(d(3, 1)), Validity.PERMANENT, None, NOW),
])
def test_lifetime_follows_the_date(validity: Validity, when: When | None, kept: Validity,
                                   expires: datetime | None, anchor: datetime) -> None:
    assert rules.dated_lifetime(validity, when, NOW, NOW) == (kept, expires, anchor)


@pytest.mark.parametrize("days", [0, 3, 7, 8, 15])
def test_an_event_ahead_keeps_its_importance_until_it_is_over(days: int) -> None:
    draft = MemoryDraft(event="去杭州出差", keywords=["杭州", "出差"], importance=60, validity=Validity.DAYS_7,
                        happens=W(d(12, 30)))
    memory = rules.new_memory(draft, 1, NOW)
    later = NOW + timedelta(days=days)
    importance, _ = rules.decay(memory.importance, memory.validity, memory.last_decay_at, None, later)
    assert importance == 60
    assert rules.removal_reason(importance, memory.validity, memory.expires_at, None, later) is None


def test_an_event_is_cleaned_up_a_week_after_it_ended() -> None:
    draft = MemoryDraft(event="去杭州出差", keywords=["杭州", "出差"], importance=60, validity=Validity.DAYS_30,
                        happens=W(d(12, 9), d(12, 11)))
    memory = rules.new_memory(draft, 1, NOW)
    assert memory.happens == draft.happens
    for day, reason in [(d(12, 18), None), (d(12, 19), "expired")]:
        moment = datetime.combine(day, time(1), UTC)
        assert rules.removal_reason(memory.importance, memory.validity, memory.expires_at, None, moment) == reason


@pytest.mark.parametrize(("value", "kept"), [
    ("2026-12-09", d(12, 9)),
    (" 2026-12-09T10:00 ", d(12, 9)),
    ("2026-13-01", None),
    ("2031-01-01", None),  # implausibly far from the day it was told
    ("next wednesday", None),
    (None, None),
    (20261209, None),
])
def test_a_models_date_is_checked(value: object, kept: date | None) -> None:
    assert dates.model_date(value, FRI) == kept
