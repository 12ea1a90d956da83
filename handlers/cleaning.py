"""Message text that cannot be encoded (a lone surrogate Telegram passed on from a client) is made sendable
before any filter or handler sees it: otherwise the reply to it, the model call and the stored turn would
each fail on encoding it (``companion.core.text.sendable``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject

from companion.core.text import sendable


class SendableText(BaseMiddleware):
    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if isinstance(event, Message):
            changes = {name: sendable(value) for name in ("text", "caption")
                       if isinstance(value := getattr(event, name), str) and sendable(value) != value}
            if changes:
                event = event.model_copy(update=changes)
        return await handler(event, data)
