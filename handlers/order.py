"""One user's updates are handled in the order they were sent.

aiogram handles the updates of one ``getUpdates`` batch as concurrent tasks, so a text and the
``/stop_aiGF`` sent a second after it could be handled the other way round: the stop confirmed first
and the text then refused as "companion mode is off", never answered and never kept for memory. This
outer middleware runs one user's updates (per chat) one after another; different users stay concurrent.
aiogram starts the tasks in update order and nothing awaits before this middleware, so the lock's
first-come-first-served queue is the order the user sent.

The exclusion is an ``Ordering``: one process's asyncio locks by default; a deployment of several
workers, each polling its share of the updates, hands in one they share (or routes a user to one worker).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject

from companion.engine.locks import KeyedLocks

Key = tuple[int, int]  # (chat id, user id)


class Ordering(Protocol):
    def hold(self, key: Key) -> AbstractAsyncContextManager[None]:
        """Exclusive for this key while open, granted in the order asked."""
        ...


class PerUserOrder(BaseMiddleware):
    def __init__(self, ordering: Ordering | None = None) -> None:
        self._ordering: Ordering = ordering or KeyedLocks[Key]()

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Message) or event.from_user is None:
            return await handler(event, data)
        async with self._ordering.hold((event.chat.id, event.from_user.id)):
            return await handler(event, data)
