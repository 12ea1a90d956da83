"""The plugin's own clock jobs, off AstrBot's loop work: the nightly upkeep, the opt-in weekly summary
("这周我记住了……") sent on Monday morning in the configured timezone through AstrBot's send API, to the
private chat where the user turned it on, and the follow-ups written first (the engine's choice, the same
rules as the Telegram bot's). Sending and the model are handed in, so nothing here imports astrbot."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, time, timedelta, tzinfo
from typing import TYPE_CHECKING

from companion.core.errors import LLMError
from companion.core.models import Status
from companion.core.setting import HOST_ADDRESS, WEEKLY, WEEKLY_SENT
from companion.core.week import WEEK, summarise_week
from companion.hosts.astrbot import texts

if TYPE_CHECKING:
    from companion.hosts.astrbot.service import MemoryService

log = logging.getLogger(__name__)

MONDAY = 0
WEEKLY_AT = time(10, 0)  # the Telegram bot's hour
Send = Callable[[str, str], Awaitable[bool]]  # (address, text) -> delivered
Reachable = Callable[[str], bool]  # whether the platform of an address lets the bot write first
Write = Callable[[str], Awaitable[str]]  # a prompt -> the model's words (raises LLMError)
FOLLOWUP_EVERY = timedelta(minutes=30)
FOLLOWUP_MAX_CHARS = 300


def next_at(now: datetime, tz: tzinfo, at: time, weekday: int | None = None) -> datetime:
    """The next local ``at`` (on ``weekday`` when given) strictly after ``now``, in UTC."""
    local = now.astimezone(tz)
    moment = local.replace(hour=at.hour, minute=at.minute, second=0, microsecond=0)
    if weekday is not None:
        moment += timedelta(days=(weekday - moment.weekday()) % 7)
    if moment <= local:
        moment += timedelta(days=1 if weekday is None else 7)
    return moment.astimezone(UTC)


async def weekly_round(service: MemoryService, now: datetime, send: Send) -> int:
    """On a Monday (local), every opted-in scope not sent one in the last week gets its summary; a send
    that fails is not recorded, so the next run tries again. Returns how many went out."""
    if now.astimezone(service.options.tz).weekday() != MONDAY:
        return 0
    sent = 0
    store = service.store
    for scope in sorted(await store.scopes(), key=lambda s: s.key):
        address = await store.get_setting(HOST_ADDRESS, scope)
        if not address or not await store.get_setting(WEEKLY, scope):
            continue
        last = await store.get_setting(WEEKLY_SENT, scope)
        if last is not None and now - last < WEEK - timedelta(hours=12):
            continue
        week = summarise_week(await service.engine.memories(scope, set(Status)), now)
        if await send(address, texts.weekly(week)):
            await store.set_setting(WEEKLY_SENT, scope, now)
            sent += 1
    return sent


async def followup_round(service: MemoryService, now: datetime, send: Send, reachable: Reachable,
                         write: Write) -> int:
    """One look for follow-ups to write first (``engine.followups.to_write``): each to the private chat the
    user last wrote from, only where the platform lets the bot write first, written by AstrBot's model from
    the memory, recorded before it is sent (at most once). Returns how many went out."""
    if not service.options.followups:
        return 0
    sent = 0
    for item in await service.engine.followups.to_write(now, service.options.hours):
        scope, memory = item.thread.scope, item.memory
        address = await service.store.get_setting(HOST_ADDRESS, scope)
        if not address or not reachable(address):
            continue
        try:
            text = (await write(service.engine.followups.prompt(memory, now))).strip()[:FOLLOWUP_MAX_CHARS]
        except LLMError as exc:
            log.warning("follow-up not written, the model failed: %s", type(exc).__name__)
            continue
        if not text:
            continue
        if not await service.engine.followups.sent(scope, memory.id, now):
            continue  # forgotten while the model wrote
        if await send(address, text + (texts.FOLLOWUP_HOW_TO_STOP if item.first else "")):
            sent += 1
    return sent


async def every(when: Callable[[datetime], datetime], job: Callable[[datetime], Awaitable[object]],
                clock: Callable[[], datetime], what: str) -> None:
    """Sleep to ``when(now)``, run ``job``; a failed run is logged and the next one comes as planned."""
    while True:
        now = clock()
        await asyncio.sleep(max(1.0, (when(now) - now).total_seconds()))
        try:
            await job(clock())
        except Exception:  # an edge: the plugin's scheduler never dies of one run
            log.exception("%s failed", what)
