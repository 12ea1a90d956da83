"""One user's updates are handled in the order they were sent, through aiogram's ``events_isolation``.

aiogram handles the updates of one ``getUpdates`` batch as concurrent tasks, so a text and the
``/stop_aiGF`` sent a second after it could be handled the other way round: the stop confirmed first
and the text then refused as "companion mode is off", never answered and never kept for memory. aiogram's
FSM middleware holds the dispatcher's ``events_isolation`` lock around each update, keyed by the user in the
chat (``FSMStrategy.USER_IN_CHAT``: a forum topic's thread is not part of the key): one user's updates in a
chat run one after another, different users stay concurrent. aiogram starts the tasks in update order and
nothing before that middleware awaits, so the lock's first-come-first-served queue is the order the user sent.
Every kind of update with a user is held so, a button press too: it waits for that user's update running
in the same chat.

``UserOrder`` is that lock on ``KeyedLocks``, which keeps no lock for an idle user (aiogram's
``SimpleEventIsolation`` keeps one per user for ever). The middleware asks the storage for the user's FSM
state on every update and no handler keeps any (conversation state lives in the session and the store), so
``NoState`` answers without remembering the key as aiogram's ``MemoryStorage`` would. A deployment whose
workers shared one user's updates would hand in a shared isolation (aiogram's ``RedisEventIsolation``); the
Redis workers route each chat to one worker instead (docs/architecture.md, "More than one process").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from aiogram.fsm.state import State
from aiogram.fsm.storage.base import BaseEventIsolation, BaseStorage, StorageKey

from companion.core.keyedlocks import KeyedLocks


class UserOrder(BaseEventIsolation):
    def __init__(self) -> None:
        self._locks = KeyedLocks[StorageKey]()

    @asynccontextmanager
    async def lock(self, key: StorageKey) -> AsyncIterator[None]:
        async with self._locks.hold(key):
            yield

    async def close(self) -> None:
        pass


class NoState(BaseStorage):
    """FSM storage for a bot that keeps no FSM state: a handler that tried to set some fails loudly."""

    async def set_state(self, key: StorageKey, state: str | State | None = None) -> None:
        raise NotImplementedError("no handler keeps aiogram FSM state")

    async def get_state(self, key: StorageKey) -> str | None:
        return None

    async def set_data(self, key: StorageKey, data: Mapping[str, Any]) -> None:
        raise NotImplementedError("no handler keeps aiogram FSM data")

    async def get_data(self, key: StorageKey) -> dict[str, Any]:
        return {}

    async def close(self) -> None:
        pass
