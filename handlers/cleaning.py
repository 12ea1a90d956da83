"""What arrives unusable is made harmless before any filter or handler sees it.

Message text that cannot be encoded (a lone surrogate Telegram passed on from a client) is made sendable:
otherwise the reply to it, the model call and the stored turn would each fail on encoding it
(``companion.core.text.sendable``). An update of no known type (one the session could not read and kept by its
id alone, ``handlers.client_session.readable_updates``) is passed over quietly."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.dispatcher.event.bases import UNHANDLED
from aiogram.types import Message, TelegramObject, Update
from aiogram.types.update import UpdateTypeLookupError

from companion.core.text import sendable

Next = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]  # the rest of the chain


class SendableText(BaseMiddleware):
    async def __call__(self, handler: Next, event: TelegramObject, data: dict[str, Any]) -> Any:
        if isinstance(event, Message):
            changes = {name: sendable(value) for name in ("text", "caption")
                       if isinstance(value := getattr(event, name), str) and sendable(value) != value}
            if changes:
                event = event.model_copy(update=changes)
        return await handler(event, data)


class KnownUpdates(BaseMiddleware):
    """An update with nothing but its id is handled as nothing: polling confirms it all the same, and the log
    holds the session's one line on why, not aiogram's warning that the Bot API changed."""

    async def __call__(self, handler: Next, event: TelegramObject, data: dict[str, Any]) -> Any:
        if isinstance(event, Update):
            try:
                event.event_type  # noqa: B018 (the lookup is the check)
            except UpdateTypeLookupError:
                return UNHANDLED
        return await handler(event, data)
