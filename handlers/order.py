"""One user's updates are handled in the order they were sent.

aiogram handles the updates of one ``getUpdates`` batch as concurrent tasks, so a text and the
``/stop_aiGF`` sent a second after it could be handled the other way round: the stop confirmed first
and the text then refused as "companion mode is off", never answered and never kept for memory. This
outer middleware runs one user's updates (per chat) one after another; different users stay concurrent.
aiogram starts the tasks in update order and nothing awaits before this middleware, so the lock's
first-come-first-served queue is the order the user sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Message, TelegramObject

Key = tuple[int, int]


class PerUserOrder(BaseMiddleware):
    def __init__(self) -> None:
        # lock and how many updates hold or wait for it; dropped at zero so idle users cost nothing
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        if not isinstance(event, Message) or event.from_user is None:
            return await handler(event, data)
        key = (event.chat.id, event.from_user.id)
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                return await handler(event, data)
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)
