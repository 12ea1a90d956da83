"""The last line of defence: log the traceback and tell the user something went wrong."""

from __future__ import annotations

import logging

from aiogram import Router
from aiogram.types import ErrorEvent

from companion.chat import texts

log = logging.getLogger(__name__)


async def on_error(event: ErrorEvent) -> bool:
    log.error("update %s failed", event.update.update_id, exc_info=event.exception)
    message = event.update.message
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
