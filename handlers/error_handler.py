"""The last line of defence: log the traceback and tell the user something went wrong."""

from __future__ import annotations

import logging

from aiogram import Router
from aiogram.exceptions import TelegramForbiddenError
from aiogram.types import ErrorEvent

from companion.chat import texts
from companion.chat.buffer import Buffering
from companion.chat.pipeline import ChatService
from handlers.delivery import switch_off_blocked
from handlers.scope import scope_of

log = logging.getLogger(__name__)


async def on_error(event: ErrorEvent, chat: ChatService, buffer: Buffering) -> bool:
    message = event.update.message
    scope = scope_of(message) if message is not None else None
    if isinstance(event.exception, TelegramForbiddenError) and scope is not None:
        # Not a bug: the user blocked the bot. Nothing can be sent to them, so no error notice either.
        await switch_off_blocked(chat, buffer, scope)
        return True
    log.error("update %s failed", event.update.update_id, exc_info=event.exception)
    if message is not None:
        try:
            await message.answer(texts.INTERNAL_ERROR)
        except Exception:  # Telegram itself may be what failed; nothing more to do at this edge.
            log.warning("could not send the error notice", exc_info=True)
    return True


def build() -> Router:
    router = Router(name="errors")
    router.errors.register(on_error)
    return router
