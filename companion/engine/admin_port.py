"""The operators' narrow door to every user's memories (``ops.admin``: the Telegram admin commands and
``python bot.py users | export | stats``): the scopes, each scope's memories read in short batches, whose
memory a handle is, and the usage log's report. Changes go through the engine's own API, never through here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from companion.core.models import Memory, Scope
from companion.core.usage import UsageCell
from companion.storage.base import MemoryRecords, ScopeRegistry, UsageLog


class AdminStore(ScopeRegistry, MemoryRecords, Protocol):
    """What the admin port wraps: the scope registry and the memory records (read only)."""


class AdminPort:
    """Reads over every user for the operators; ``usage``: the log of LLM calls, None where there is none."""

    def __init__(self, store: AdminStore, usage: UsageLog | None) -> None:
        self._store = store
        self._usage = usage

    async def scopes(self) -> list[Scope]:
        return await self._store.scopes()

    def stream_memories(self, scopes: Sequence[Scope]) -> AsyncIterator[tuple[Scope, list[Memory]]]:
        """Every memory in every status of ``scopes``, in batches: each batch one short read."""
        return self._store.stream_memories(scopes)

    async def owner_of(self, handle: int) -> Scope | None:
        """Whose memory a handle names, or None for a handle never issued."""
        return await self._store.owner_of(handle)

    async def usage_report(self, since: datetime, offset: timedelta) -> list[UsageCell]:
        """LLM calls since ``since`` by local day (cut at ``offset`` from UTC) and purpose; none without a log."""
        return [] if self._usage is None else await self._usage.report(since, offset)
