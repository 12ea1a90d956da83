"""The optional capabilities a store may offer, each behind a method of ``base.Capabilities`` that returns
None where a backend has no such thing: the memory vectors for semantic recall, the log of LLM calls, and
the file-level upkeep of a database kept in one file. Layers above import these through ``base``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from companion.core.models import Scope
from companion.core.usage import UsageCell, UsageRecord

# ---- the vectors capability -------------------------------------------------------------------------


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class VectorRow:
    handle: int
    text_hash: str
    vector: Sequence[float]


class VectorIndex(Protocol):
    """One scope's vectors never meet another's; vectors of one model are never compared with another's."""

    @property
    def backend(self) -> str: ...

    async def close(self) -> None: ...
    async def put(self, scope: Scope, model: str, rows: Sequence[VectorRow], now: datetime) -> int: ...
    async def delete(self, handles: Sequence[int]) -> int: ...
    async def prune(self, scope: Scope | None = None) -> int: ...
    async def drop_other_models(self, model: str) -> int: ...
    async def hashes(self, scope: Scope, model: str) -> dict[int, str]: ...
    async def count(self, model: str | None = None) -> int: ...
    async def nearest(self, scope: Scope, model: str, query: Sequence[float], k: int) -> list[tuple[int, float]]: ...


# ---- the usage-log capability -----------------------------------------------------------------------


class UsageLog(Protocol):
    async def add(self, record: UsageRecord) -> None:
        """Keep one call (the LLM client's record; one of ``LLMClient.usage_sinks``)."""
        ...

    async def report(self, since: datetime, offset: timedelta) -> list[UsageCell]:
        """Calls since ``since`` by local day and purpose, oldest day first; days cut at ``offset`` from UTC."""
        ...

    async def page(self, after: int, limit: int) -> list[tuple[int, UsageRecord]]:
        """Up to ``limit`` rows in the order they were written, after the row numbered ``after`` (0: from the
        first): (number, row). A copy to another database reads them all."""
        ...


# ---- the maintenance capability (a database file) ---------------------------------------------------


class Maintenance(Protocol):
    """What the backup and the start-up upkeep need of a store kept in one database file."""

    @property
    def path(self) -> Path: ...

    async def snapshot(self, target: Path, *, standalone: bool = True) -> None:
        """A consistent copy of the whole database at ``target``."""
        ...

    async def upgrade_stale(self, limit: int = 50) -> int:
        """Upgrade up to ``limit`` rows of tables left at an old schema; 0 when none is left."""
        ...

    def memory_table(self, scope: Scope) -> str:
        """The table a scope's memories live in (diagnostics: a benchmark tells a spare table taken)."""
        ...
