"""Proactive memory messages: reviews once a day at a sensible local hour to users in companion mode,
the opt-in weekly summary, and the background upgrade of old tables."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from companion.core import followup_rules as followups
from companion.core.models import Memory, MemoryDraft, Scope, Validity
from companion.core.setting import REVIEW_SENT, WEEKLY
from companion.core.tiers import Suggestion
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.jobs import proactive as reviews
from companion.ops.jobs import scheduled as jobs
from companion.ops.jobs.leader import ALONE
from companion.ops.jobs.upgrade import upgrade_tables
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from companion.storage.inmemory import InMemoryStore
from companion.storage.sqlite import SQLiteStore
from companion.storage.sqlite.migrations import MEMORIES
from memory import EngineConfig, MemoryEngine
from tests.support import make_settings

TZ = ZoneInfo("Asia/Shanghai")
START = datetime(2025, 12, 1, 2, 0, tzinfo=UTC)  # 10:00 in Shanghai
ME, QUIET, OFF = Scope(1), Scope(2), Scope(3)
_KEYWORDS = KeywordExtractor()


@pytest.fixture
async def engine(any_store: MemoryStore) -> MemoryEngine:
    _KEYWORDS.load()
    engine = MemoryEngine(any_store, _KEYWORDS, EngineConfig())
    for scope in (ME, QUIET, OFF):
        await engine.remember(scope, [MemoryDraft(f"{scope.key} 在学吉他", ["吉他"], 60.0, validity=Validity.DAYS_7)],
                              START)
    await engine.set_active(ME, True, START)
    await engine.set_active(QUIET, True, START)  # active, but its review is not due yet (see below)
    return engine


@pytest.mark.parametrize(("utc_hour", "inside"), [(0, True), (1, True), (12, True), (13, False), (20, False)])
def test_sensible_local_hours(utc_hour: int, inside: bool) -> None:
    # 09:00-21:00 in Shanghai is 01:00-13:00 UTC; 00:00 UTC is 08:00 local, outside.
    moment = datetime(2025, 12, 1, utc_hour, 30, tzinfo=UTC)
    assert followups.within_hours(moment, TZ, (9, 21)) is (inside and utc_hour != 0)


async def test_reviews_go_once_a_day_to_active_users_with_due_memories(engine: MemoryEngine) -> None:
    sent: list[tuple[Scope, list[str]]] = []

    async def send(scope: Scope, items: Sequence[tuple[Memory, Suggestion]]) -> bool:
        sent.append((scope, [m.event for m, _ in items]))
        return True

    [quiet] = await engine.memories(QUIET)
    await engine.keep(QUIET, quiet.id, START + timedelta(days=3))  # pushed back: not due on day 7
    day7 = START + timedelta(days=7)
    assert await reviews.review_round(engine, day7, TZ, (9, 21), send) == 1
    assert sent == [(ME, ["u1 在学吉他"])]  # not the user in companion-off mode, not the one not yet due
    assert await reviews.review_round(engine, day7 + timedelta(hours=3), TZ, (9, 21), send) == 0  # once a day
    night = day7 + timedelta(hours=14)  # 00:00 local
    assert await reviews.review_round(engine, night + timedelta(days=1), TZ, (9, 21), send) == 0
    assert await reviews.review_round(engine, day7 + timedelta(days=1), TZ, (9, 21), send) == 1


async def test_an_unreachable_user_is_not_marked_as_reviewed(engine: MemoryEngine) -> None:
    async def blocked(scope: Scope, items: Sequence[tuple[Memory, Suggestion]]) -> bool:
        return False

    day7 = START + timedelta(days=7)
    assert await reviews.review_round(engine, day7, TZ, (9, 21), blocked) == 0
    assert await engine.setting(REVIEW_SENT, ME) is None


async def test_weekly_summary_is_opt_in(engine: MemoryEngine) -> None:
    got: list[reviews.WeekSummary] = []

    async def send(scope: Scope, week: reviews.WeekSummary) -> bool:
        got.append(week)
        return True

    now = START + timedelta(days=2)
    assert await reviews.weekly_round(engine, now, send) == 0
    await engine.set_setting(WEEKLY, ME, True)
    [memory] = await engine.memories(ME)
    await engine.promote(ME, memory.id, now)
    assert await reviews.weekly_round(engine, now, send) == 1
    assert [m.event for m in got[0].learned] == ["u1 在学吉他"] and got[0].promoted == 1
    assert await reviews.weekly_round(engine, now + timedelta(days=1), send) == 0  # once a week


async def test_background_upgrade_reaches_every_old_table(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite3"
    store = await SQLiteStore.open(path)
    await store.close()
    conn = sqlite3.connect(path)
    for n in range(1, 8):  # seven users whose tables are still at the first release's version
        key = Scope(n).key
        conn.execute("INSERT INTO scopes (key, user_id, table_version, created_at) VALUES (?, ?, 2, 'x')", (key, n))
        for step in MEMORIES.steps[:2]:
            conn.executescript(step.script.format(table=Scope(n).table))
    conn.commit()
    conn.close()
    store = await SQLiteStore.open(path)
    try:
        assert await upgrade_tables(MaintenancePort(store), batch=3, pause=0) == 2  # 3 + 3 + 1 tables
        assert await store.upgrade_stale() == 0
    finally:
        await store.close()


class Follower:
    """A worker that does not lead: the scheduled jobs are another process's."""

    async def leads(self) -> bool:
        return False


@pytest.mark.parametrize("leads", [False, True])
async def test_only_the_leading_process_runs_the_scheduled_jobs(
    engine: MemoryEngine, tmp_path: Path, leads: bool
) -> None:
    leader = ALONE if leads else Follower()
    scheduler = AsyncIOScheduler(timezone=TZ)
    weekly: list[Scope] = []

    async def send_weekly(scope: Scope, summary: reviews.WeekSummary) -> bool:
        weekly.append(scope)
        return True

    async def send_review(scope: Scope, items: Sequence[tuple[Memory, Suggestion]]) -> bool:
        return True

    await reviews.set_weekly(engine, ME, True)
    reviews.schedule(scheduler, engine, TZ, (0, 24), send_review, send_weekly, leader)
    database = MaintenancePort(InMemoryStore())
    decay = jobs.build_scheduler(engine, database, make_settings(tmp_path), leader).get_job("decay")
    await scheduler.get_job("weekly").func()
    await decay.func()
    assert weekly == ([ME] if leads else [])
    assert (await engine.last_decay_at() is not None) is leads
