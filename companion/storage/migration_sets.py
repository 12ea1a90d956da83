"""Named, append-only migration sets, one per owner of tables: the shape both backends write their schemas
in (``sqlite.migrations`` runs SQLite's, ``postgres.schema`` PostgreSQL's). Never edit a step that has
shipped: add one. Imports no database driver, so PostgreSQL's schema does not load SQLite's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

# The first argument is the backend's own connection (an aiosqlite one for SQLite's coroutine steps; PostgreSQL's
# steps are scripts only): typed ``Any`` so this module names no driver.
Runner = Callable[[Any, str, str], Awaitable[None]]  # (connection, scope key, table)
# (connection, tables): one call for many tables, for a step whose cost is per call, not per table.
ManyRunner = Callable[[Any, Sequence[str]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Migration:
    """A step: an SQL script (``{table}`` stands for a memory table's name) or a coroutine, for one table
    at a time, or ``run_many`` for any number of tables in one call."""

    name: str
    script: str = ""
    run: Runner | None = None
    run_many: ManyRunner | None = None


@dataclass(frozen=True, slots=True)
class MigrationSet:
    owner: str
    steps: tuple[Migration, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(step.name for step in self.steps)
