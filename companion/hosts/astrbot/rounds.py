"""The plugin's own clock jobs, off AstrBot's loop work: the nightly upkeep, the opt-in weekly summary
("这周我记住了……", the Telegram bot's rule and words: ``engine.weekly``) sent on Monday morning in the
configured timezone through AstrBot's send API, to the private chat where the user turned it on, and the
follow-ups written first (the engine's choice, the same rules as the Telegram bot's). Sending and the
model are handed in, so nothing here imports astrbot."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from companion.core.errors import LLMError
from companion.core.models import Scope
from companion.core.setting import HOST_ADDRESS
from companion.core.week import WeekSummary
from companion.engine import weekly
from companion.engine.followup_threads import DueFollowUp
from companion.hosts.astrbot import replies as texts

if TYPE_CHECKING:
    from companion.hosts.astrbot.memory_service import MemoryService

log = logging.getLogger(__name__)

Send = Callable[[str, str], Awaitable[bool]]  # (address, text) -> delivered
Reachable = Callable[[str], bool]  # whether the platform of an address lets the bot write first
Write = Callable[[str], Awaitable[str]]  # a prompt -> the model's words (raises LLMError)
FOLLOWUP_EVERY = timedelta(minutes=30)
FOLLOWUP_MAX_CHARS = 300


async def weekly_round(service: MemoryService, now: datetime, send: Send) -> int:
    """On the round's local day (a Monday), every opted-in scope not sent one in the last week gets its
    summary at the address it opted in from; a send that fails is not recorded, so the next run tries
    again. Returns how many went out."""
    if not weekly.weekly_day(now, service.options.tz):
        return 0

    async def deliver(scope: Scope, week: WeekSummary) -> bool:
        address = await service.engine.settings.get(HOST_ADDRESS, scope)
        return address is not None and await send(address, texts.weekly(week))

    return await weekly.weekly_round(service.engine, now, deliver)


async def followup_round(service: MemoryService, now: datetime, send: Send, reachable: Reachable,
                         write: Write) -> int:
    """One look for follow-ups to write first (``engine.followups.to_write``): each to the private chat the
    user last wrote from, only where the platform lets the bot write first, written by AstrBot's model from
    the memory, recorded before it is sent (at most once). Returns how many went out."""
    if not service.options.followups:
        return 0
    followups = service.engine.followups

    async def one(item: DueFollowUp) -> bool:
        scope, memory = item.thread.scope, item.memory
        address = await service.engine.settings.get(HOST_ADDRESS, scope)
        if not address or not reachable(address):
            return False
        try:
            text = (await write(followups.prompt(memory, now))).strip()[:FOLLOWUP_MAX_CHARS]
        except LLMError as exc:
            log.warning("follow-up not written, the model failed: %s", type(exc).__name__)
            return False
        if not text:
            return False
        text += texts.FOLLOWUP_HOW_TO_STOP if item.first else ""
        return await followups.deliver(scope, memory.id, now, lambda: send(address, text))

    return await followups.round(now, service.options.hours, one, at_once=1)


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
