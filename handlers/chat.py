"""Text messages in companion mode: buffer, then one reply per quiet period."""

from __future__ import annotations

import logging

from aiogram import Bot, F, Router
from aiogram.types import Message

from companion.chat import texts
from companion.chat.buffer import MessageBuffer
from companion.chat.pipeline import ChatService
from companion.core.errors import CompanionError
from companion.core.models import Scope
from handlers.delivery import deliver, switch_off_blocked, typing
from handlers.scope import scope_of

log = logging.getLogger(__name__)


async def on_text(message: Message, bot: Bot, chat: ChatService, buffer: MessageBuffer) -> None:
    scope = scope_of(message)
    if scope is None or message.text is None:
        return
    if not chat.is_active(scope):
        await message.answer(texts.NOT_STARTED)
        return
    chat_id = message.chat.id

    async def flush(text: str) -> None:
        await answer_turn(bot, chat, buffer, scope, chat_id, text)

    buffer.push(scope, message.text, flush)


async def answer_turn(
    bot: Bot, chat: ChatService, buffer: MessageBuffer, scope: Scope, chat_id: int, text: str
) -> None:
    try:
        async with typing(bot, chat_id):
            reply = (await chat.reply(scope, text)).text
    except CompanionError:
        # Runs in the buffer's task, outside aiogram's error handler: answer here, log the traceback.
        log.exception("turn for %s failed", scope.key)
        reply = texts.INTERNAL_ERROR
    if not await deliver(bot, chat_id, reply):
        await switch_off_blocked(chat, buffer, scope)


async def on_unknown_command(message: Message) -> None:
    await message.answer(texts.HELP)


async def on_other(message: Message) -> None:
    """Stickers, photos, voice and the rest: a friendly word instead of silence or a crash."""
    await message.answer(texts.NON_TEXT)


def build() -> Router:
    router = Router(name="chat")
    router.message.filter(F.chat.type == "private")
    router.message.register(on_text, F.text & ~F.text.startswith("/"))
    router.message.register(on_unknown_command, F.text.startswith("/"))
    router.message.register(on_other)
    return router
