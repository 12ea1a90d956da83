"""Proactive memory messages: the review of memories that reached their time, the opt-in weekly
summary, and the follow-up round's schedule (the round itself is the chat layer's). Scheduling and choosing
who gets what live here; sending is handed in by the composition root
(so nothing here knows Telegram). A send that reports the user unreachable is simply not recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta, tzinfo

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from companion.core import tiers
from companion.core.followup_rules import within_hours
from companion.core.models import Memory, Scope
from companion.core.setting import REVIEW_SENT, WEEKLY
from companion.core.timeutil import utcnow
from companion.core.week import WeekSummary as WeekSummary  # the senders' type, where it always was
from companion.engine import weekly
from companion.ops.jobs.leader import ALONE, Leader
from companion.ops.jobs.scheduled import led
from memory import MemoryEngine

log = logging.getLogger(__name__)

REVIEW_EVERY = timedelta(hours=20)  # at most one review message a day (a little slack for the hourly job)
BATCH = 5

ReviewSender = Callable[[Scope, Sequence[tuple[Memory, tiers.Suggestion]]], Awaitable[bool]]
WeeklySender = Callable[[Scope, "WeekSummary"], Awaitable[bool]]


async def review_round(
    engine: MemoryEngine, now: datetime, tz: tzinfo, hours: tuple[int, int], send: ReviewSender
) -> int:
    """One pass over the users in companion mode: whoever has memories due and got no review message in
    the last day gets one, batched. Returns how many messages went out."""
    if not within_hours(now, tz, hours):
        return 0
    sent = 0
    for scope in sorted(await engine.active_scopes(), key=lambda s: s.key):
        last = await engine.setting(REVIEW_SENT, scope)
        if last is not None and now - last < REVIEW_EVERY:
            continue
        due = await engine.due_reviews(scope, now)
        if not due:
            continue
        if await send(scope, due[:BATCH]):
            await engine.set_setting(REVIEW_SENT, scope, now)
            sent += 1
    return sent


async def week_summary(engine: MemoryEngine, scope: Scope, now: datetime) -> WeekSummary:
    return await weekly.week_summary(engine, scope, now)


async def set_weekly(engine: MemoryEngine, scope: Scope, on: bool) -> None:
    """/weekly on|off: whether ``weekly_round`` sends this scope its summary."""
    await engine.set_setting(WEEKLY, scope, on)


async def weekly_round(engine: MemoryEngine, now: datetime, send: WeeklySender) -> int:
    """The opt-in weekly "这周我记住了……" for every user who turned it on (/weekly on): every host's rule
    (``engine.weekly``)."""
    return await weekly.weekly_round(engine, now, send)


FollowUpRound = Callable[[datetime], Awaitable[int]]


def schedule_followups(scheduler: AsyncIOScheduler, round_: FollowUpRound, minutes: float,
                       leader: Leader = ALONE) -> None:
    """Follow-ups written first: every ``minutes``, where the leader runs (one message, not one a worker).
    A round after downtime sends only what is still due now, never a burst of old ones (the round's rules)."""
    async def followups_job() -> None:
        await led(leader, "follow-ups", lambda: round_(utcnow()))

    scheduler.add_job(followups_job, IntervalTrigger(minutes=minutes), id="followups", coalesce=True,
                      misfire_grace_time=int(minutes * 60), max_instances=1)


def schedule(scheduler: AsyncIOScheduler, engine: MemoryEngine, tz: tzinfo, hours: tuple[int, int],
             send_review: ReviewSender, send_weekly: WeeklySender, leader: Leader = ALONE) -> None:
    """Reviews are checked every hour (sent only in local daytime, once a day at most); the weekly summary
    goes out on Monday mornings. Only the process that leads sends them (one message, not one a worker)."""
    async def reviews_job() -> None:
        await led(leader, "reviews", lambda: review_round(engine, utcnow(), tz, hours, send_review))

    async def weekly_job() -> None:
        await led(leader, "weekly", lambda: weekly_round(engine, utcnow(), send_weekly))

    options = {"coalesce": True, "misfire_grace_time": 3600, "max_instances": 1}
    scheduler.add_job(reviews_job, CronTrigger(minute=5, timezone=tz), id="reviews", **options)
    scheduler.add_job(weekly_job, CronTrigger(day_of_week=weekly.WEEKLY_DAY, hour=weekly.WEEKLY_AT.hour,
                                              minute=weekly.WEEKLY_AT.minute, timezone=tz), id="weekly", **options)
