"""Narrow doors through the engine for the layers above that keep state of their own beside the memories:
typed settings by any key (a group's switches, a user's opt-ins) and the Dida365 kanban's rows with the
change journal it reads as its outbox. The chat and kanban layers hold these, never the store, so what they
may do to the database is exactly what is listed here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from companion.core.changes import Change
from companion.core.models import Scope
from companion.core.setting import Setting
from companion.storage.base import ChangeJournal, KanbanState, SettingStore

K = TypeVar("K")
V = TypeVar("V")


class TypedSettings:
    """Get and set one typed setting (``core.setting``) under its key: a scope, a chat or user id, or None."""

    def __init__(self, store: SettingStore) -> None:
        self._store = store

    async def get(self, setting: Setting[K, V], key: K) -> V | None:
        """The stored value, or None when it was never set."""
        return await self._store.get_setting(setting, key)

    async def set(self, setting: Setting[K, V], key: K, value: V) -> None:
        await self._store.set_setting(setting, key, value)


class KanbanStore(KanbanState, ChangeJournal, Protocol):
    """What the kanban port wraps: its own rows and the journal."""


class KanbanPort:
    """The kanban's rows (the link per linked user, one card row per synced memory, as text the kanban
    encodes) and the change journal of a user's scopes, read as the kanban's outbox."""

    def __init__(self, store: KanbanStore) -> None:
        self._store = store

    async def dida_link(self, user_id: int) -> str | None:
        return await self._store.dida_link(user_id)

    async def put_dida_link(self, user_id: int, data: str | None) -> None:
        """``None`` removes the link with every card row of the user."""
        await self._store.put_dida_link(user_id, data)

    async def dida_users(self) -> list[int]:
        return await self._store.dida_users()

    async def dida_cards(self, user_id: int) -> dict[int, str]:
        return await self._store.dida_cards(user_id)

    async def put_dida_cards(self, user_id: int, cards: Mapping[int, str | None]) -> None:
        """``None`` for a handle removes its row."""
        await self._store.put_dida_cards(user_id, cards)

    async def change_counter(self, scope: Scope) -> int:
        return await self._store.change_counter(scope)

    async def changes_since(self, scope: Scope, after: int, limit: int) -> list[Change]:
        return await self._store.changes_since(scope, after, limit)
