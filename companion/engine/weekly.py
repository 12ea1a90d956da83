"""The opt-in weekly summary ("这周我记住了……"), one rule for every host: who gets it (companion mode on and
the switch on), how often (once a week, a failed send retried at the next run), when it runs (Monday at
10:00, local time) and what it says (``weekly_text``). A host hands in ``send(scope, week) -> bool`` (where
the scope's person is reached, and the words with the host's own list command, are the host's: Telegram's
private chat, an address the AstrBot plugin kept) and runs the round on its own clock: APScheduler's cron
for the Telegram bot, the plugin's sleeping task in AstrBot.
``WeeklyEngine`` is what the round needs of ``memory.MemoryEngine``, so this module stays below it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import Protocol, TypeVar

from companion.core.models import Memory, Scope, Status
from companion.core.setting import WEEKLY, WEEKLY_SENT, Setting
from companion.core.week import WEEK, WeekSummary, summarise_week

WEEKLY_DAY = 0  # Monday
WEEKLY_AT = time(10, 0)
RESEND_AFTER = WEEK - timedelta(hours=12)  # a run a little early (a restart, a late cron) is still one a week

Send = Callable[[Scope, WeekSummary], Awaitable[bool]]  # (scope, its week) -> delivered
V = TypeVar("V")


class WeeklyEngine(Protocol):
    async def active_scopes(self) -> set[Scope]: ...

    async def memories(self, scope: Scope, statuses: Collection[Status] = ...) -> list[Memory]: ...

    async def setting(self, setting: Setting[Scope, V], scope: Scope) -> V | None: ...

    async def set_setting(self, setting: Setting[Scope, V], scope: Scope, value: V) -> None: ...


def next_at(now: datetime, tz: tzinfo, at: time, weekday: int | None = None) -> datetime:
    """The next local ``at`` (on ``weekday`` when given) strictly after ``now``, in UTC."""
    local = now.astimezone(tz)
    moment = local.replace(hour=at.hour, minute=at.minute, second=0, microsecond=0)
    if weekday is not None:
        moment += timedelta(days=(weekday - moment.weekday()) % 7)
    if moment <= local:
        moment += timedelta(days=1 if weekday is None else 7)
    return moment.astimezone(UTC)


def next_weekly(now: datetime, tz: tzinfo) -> datetime:
    """When the weekly round runs next: the next Monday 10:00 in ``tz`` (a cron's ``mon 10:00``)."""
    return next_at(now, tz, WEEKLY_AT, WEEKLY_DAY)


def weekly_day(now: datetime, tz: tzinfo) -> bool:
    """Whether ``now`` is the round's local day: a clock that woke late on Monday still sends, Tuesday not."""
    return now.astimezone(tz).weekday() == WEEKLY_DAY


def weekly_text(week: WeekSummary, list_command: str) -> str:
    """The summary's words; ``list_command`` is the host's command that lists every memory."""
    lines = ["这周我记住了：", *([f"· {m.shown}" for m in week.learned[:10]] or ["· （没有新的事情）"])]
    extra = [text.format(n) for n, text in ((week.promoted, "升级了 {} 条"), (week.archived, "归档了 {} 条"),
                                             (week.evicted, "因为记忆太多清理了 {} 条小事")) if n]
    if extra:
        lines.append("另外" + "，".join(extra) + "。")
    lines.append(f"想看全部可以发 {list_command}。")
    return "\n".join(lines)


async def week_summary(engine: WeeklyEngine, scope: Scope, now: datetime) -> WeekSummary:
    return summarise_week(await engine.memories(scope, set(Status)), now)


async def weekly_round(engine: WeeklyEngine, now: datetime, send: Send) -> int:
    """Every scope in companion mode with the summary on and none sent in the last week gets one; a send
    that fails is not recorded, so the next run tries again. Returns how many went out."""
    sent = 0
    for scope in sorted(await engine.active_scopes(), key=lambda s: s.key):
        if not await engine.setting(WEEKLY, scope):
            continue
        last = await engine.setting(WEEKLY_SENT, scope)
        if last is not None and now - last < RESEND_AFTER:
            continue
        if await send(scope, await week_summary(engine, scope, now)):
            await engine.set_setting(WEEKLY_SENT, scope, now)
            sent += 1
    return sent
