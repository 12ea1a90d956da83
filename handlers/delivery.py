"""Getting replies to Telegram: wait out flood limits (429), notice a user who blocked the bot (403),
show "typing…" without letting that cosmetic call fail a turn, and edit a shown message in place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiogram import Bot
from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.enums import ChatAction
from aiogram.exceptions import (
    TelegramAPIError,
    TelegramForbiddenError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import GetMe, GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import InlineKeyboardMarkup, Message, ReplyParameters

from companion.chat import texts
from companion.chat.buffer import Buffering
from companion.chat.pipeline import ChatService
from companion.core.models import Scope, Turn

log = logging.getLogger(__name__)

FLOOD_RETRIES = 3
# Telegram's per-chat flood waits are seconds; a longer wait means a real ban, and retrying early only
# earns another 429, so such a request fails instead of holding the reply for minutes.
FLOOD_MAX_WAIT_SECONDS = 60.0
SERVER_RETRY_BASE_SECONDS = 0.5  # 5xx / connection failures: 0.5, 1, 2 s
TYPING_EVERY_SECONDS = 4.5  # Telegram shows "typing…" for about 5 s per call
# "typing…" starts only for a reply that has not come this soon: one that comes sooner is on the screen as
# quickly as the indicator would be, and the Telegram call (with its answer to parse) is saved.
TYPING_AFTER_SECONDS = 1.0

Sleep = Callable[[float], Awaitable[None]]


class RetryAfterMiddleware(BaseRequestMiddleware):
    """A session middleware: a request answered 429 is sent again after ``retry_after`` seconds, at most
    ``retries`` times and only for waits up to ``max_wait``; then the TelegramRetryAfter propagates."""

    def __init__(
        self, retries: int = FLOOD_RETRIES, max_wait: float = FLOOD_MAX_WAIT_SECONDS, sleep: Sleep = asyncio.sleep
    ) -> None:
        self.retries = retries
        self.max_wait = max_wait
        self._sleep = sleep

    async def __call__(
        self, make_request: NextRequestMiddlewareType[TelegramType], bot: Bot, method: TelegramMethod[TelegramType]
    ) -> Response[TelegramType]:
        attempt = 0
        while True:
            try:
                return await make_request(bot, method)
            except TelegramRetryAfter as exc:
                attempt += 1
                if attempt > self.retries or exc.retry_after > self.max_wait:
                    raise
                log.warning(
                    "Telegram flood limit on %s: retrying in %d s (%d of %d)",
                    type(method).__name__, exc.retry_after, attempt, self.retries,
                )
                await self._sleep(exc.retry_after)
            except (TelegramServerError, TelegramNetworkError) as exc:
                # A 5xx or a failed connection loses the reply unless it is sent again; polling has its own
                # back-off in aiogram and the start-up check must fail at once, so only outgoing calls are retried.
                attempt += 1
                if isinstance(method, GetUpdates | GetMe) or attempt > self.retries:
                    raise
                wait = SERVER_RETRY_BASE_SECONDS * 2 ** (attempt - 1)
                log.warning("Telegram %s on %s: retrying in %.1f s (%d of %d)", type(exc).__name__,
                            type(method).__name__, wait, attempt, self.retries)
                await self._sleep(wait)


class KeptResponseTypes(BaseRequestMiddleware):
    """A session middleware that holds on to aiogram's response model of each method called.

    aiogram parses every answer with ``Response[method.__returning__]``, and pydantic keeps a parametrised
    generic model only in a weak cache: after each full garbage collection ``Response[Message]`` (2-3 ms of
    schema building) was built again, over a hundred times per thousand messages
    (docs/benchmarks-history.md section 15).
    """

    def __init__(self) -> None:
        self._kept: dict[Any, Any] = {}

    async def __call__(
        self, make_request: NextRequestMiddlewareType[TelegramType], bot: Bot, method: TelegramMethod[TelegramType]
    ) -> Response[TelegramType]:
        returning = method.__returning__
        if returning not in self._kept:
            self._kept[returning] = Response[returning]  # type: ignore[valid-type]
        return await make_request(bot, method)


@contextlib.asynccontextmanager
async def typing(bot: Bot, chat_id: int) -> AsyncIterator[None]:
    """"typing…" while the body runs, from ``TYPING_AFTER_SECONDS`` on. Unlike aiogram's ChatActionSender, a
    failed action (a blocked user, a flood limit) only ends the indicator: it is never left as an unretrieved
    task exception."""

    async def keep_typing() -> None:
        while True:
            try:
                await bot.send_chat_action(chat_id, ChatAction.TYPING)
            except TelegramAPIError as exc:
                log.debug("typing indicator for chat %s stopped: %s", chat_id, exc)
                return
            await asyncio.sleep(TYPING_EVERY_SECONDS)

    # A timer, not a sleeping task: most replies come first, and then nothing was created to be cancelled.
    task: asyncio.Task[None] | None = None

    def start() -> None:
        nonlocal task
        task = asyncio.create_task(keep_typing(), name=f"typing-{chat_id}")

    timer = asyncio.get_running_loop().call_later(TYPING_AFTER_SECONDS, start)
    try:
        yield
    finally:
        timer.cancel()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def deliver(
    bot: Bot, chat_id: int, text: str, markup: InlineKeyboardMarkup | None = None,
    reply_to: ReplyParameters | None = None,
) -> bool:
    """Send a reply, split under Telegram's length limit, the buttons (if any) on the last part. False
    when the user has blocked the bot."""
    try:
        parts = texts.split_message(text)
        for i, part in enumerate(parts):
            await bot.send_message(chat_id, part, reply_parameters=reply_to,
                                   reply_markup=markup if i == len(parts) - 1 else None)
    except TelegramForbiddenError:
        return False
    return True


@contextlib.asynccontextmanager
async def kept_if_abandoned(
    chat: ChatService, scope: Scope, text: str, *, remember: bool | None = True
) -> AsyncIterator[None]:
    """A reply cancelled because the bot is stopping (companion.chat.stopping) gets no answer, but what the
    user said is queued for memory, so the next start extracts it. ``remember`` None: as the scope keeps
    memories (a group's switch: ``ChatService.keeps_memory``)."""
    try:
        yield
    except asyncio.CancelledError:
        if remember is True or (remember is None and await chat.keeps_memory(scope)):
            await chat.engine.note_turn(scope, Turn(user=text, reply=None, at=chat.clock()))
            log.info("reply for %s abandoned at stop; the turn is queued for memory", scope.key)
        raise


async def switch_off_blocked(chat: ChatService, buffer: Buffering, scope: Scope) -> None:
    """The user blocked the bot: companion mode goes off, so nothing more (proactive messages included)
    is sent to them; what they said and was not answered stays queued for memory."""
    await chat.stop(scope, unanswered=buffer.take(scope))
    log.info("user %s blocked the bot; companion mode switched off", scope.key)


async def edit_shown(message: Message, text: str, markup: InlineKeyboardMarkup | None) -> None:
    """Show ``text`` (its first message-sized part) and ``markup`` in place of ``message``; nothing is sent
    when both are what it shows already (Telegram refuses an edit that changes nothing)."""
    for part in texts.split_message(text)[:1]:
        if part != message.text or markup != message.reply_markup:
            await message.edit_text(part, reply_markup=markup)
