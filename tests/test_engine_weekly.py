"""The weekly summary's rule, every host's (``companion.engine.weekly``): when the round runs (Monday 10:00
local), its words, and who gets one: scopes in companion mode with the switch on, once a week, a failed
send retried (the hosts' rounds: tests/test_reviews.py, tests/test_astrbot_weekly.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from companion.core.models import MemoryDraft, Scope, Validity
from companion.core.setting import WEEKLY
from companion.core.week import WeekSummary
from companion.engine.values import EngineConfig
from companion.engine.weekly import next_at, next_weekly, weekly_day, weekly_round, weekly_text
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

SHANGHAI = ZoneInfo("Asia/Shanghai")
# Monday 2026-03-02 10:00 in Shanghai is 02:00 UTC.
MONDAY_10 = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


def test_the_round_runs_on_monday_at_ten_local_time() -> None:
    assert next_weekly(MONDAY_10 - timedelta(minutes=1), SHANGHAI) == MONDAY_10
    assert next_weekly(MONDAY_10, SHANGHAI) == MONDAY_10 + timedelta(days=7)
    # Sunday 23:00 UTC is already Monday 07:00 in Shanghai: three hours to go, not a week.
    assert next_weekly(datetime(2026, 3, 1, 23, 0, tzinfo=UTC), SHANGHAI) == MONDAY_10
    assert next_at(MONDAY_10, SHANGHAI, time(3, 30)) == datetime(2026, 3, 2, 19, 30, tzinfo=UTC)
    assert weekly_day(MONDAY_10 + timedelta(hours=13), SHANGHAI)  # 23:00 Monday, a late run still sends
    assert not weekly_day(MONDAY_10 + timedelta(hours=14), SHANGHAI)  # Tuesday in Shanghai


def test_the_words_name_the_hosts_list_command() -> None:
    assert weekly_text(WeekSummary([], 0, 0, 0), "/memories").splitlines() == \
        ["这周我记住了：", "· （没有新的事情）", "想看全部可以发 /memories。"]
    assert "另外升级了 1 条，归档了 2 条。" in weekly_text(WeekSummary([], 1, 2, 0), "/我的记忆")


@pytest.fixture
async def engine() -> AsyncIterator[MemoryEngine]:
    opened = await MemoryEngine.open("memory://", EngineConfig(tz=SHANGHAI), KeywordExtractor())
    try:
        yield opened
    finally:
        await opened.close()


async def test_only_scopes_in_companion_mode_that_opted_in_get_one_a_week(engine: MemoryEngine) -> None:
    on, off, quiet = Scope(1), Scope(2), Scope(3)
    for scope in (on, off, quiet):
        hiking = MemoryDraft(event="喜欢爬山", keywords=["爬山"], importance=60, validity=Validity.PERMANENT)
        await engine.remember(scope, [hiking], MONDAY_10 - timedelta(days=1))
        await engine.set_setting(WEEKLY, scope, scope != off)
    for scope in (on, off):
        await engine.set_active(scope, True, MONDAY_10)
    sent: list[tuple[Scope, WeekSummary]] = []
    delivered = False

    async def send(scope: Scope, week: WeekSummary) -> bool:
        sent.append((scope, week))
        return delivered

    assert await weekly_round(engine, MONDAY_10, send) == 0  # not delivered: not recorded
    delivered = True
    assert await weekly_round(engine, MONDAY_10 + timedelta(hours=1), send) == 1
    assert [scope for scope, _ in sent] == [on, on]
    assert [m.event for m in sent[-1][1].learned] == ["喜欢爬山"]
    assert await weekly_round(engine, MONDAY_10 + timedelta(days=6), send) == 0  # once a week
    assert await weekly_round(engine, MONDAY_10 + timedelta(days=7), send) == 1
    assert sent[-1][1].learned == []  # nothing learned in the second week
