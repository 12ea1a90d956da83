"""Where turns the database cannot take wait on disk: the shape the chat layer replays and scrubs, and the
operator's tools clear. The composition root opens them (``companion.storage.factory.open_spools``) and hands
them on; the layers above type against these protocols, not against the store's package."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from companion.core.models import Scope, Turn


class SpooledTurns(Protocol):
    """One process's file of turns the database could not take (``companion.storage.spool``)."""

    async def keep(self, scope: Scope, turns: Sequence[Turn]) -> None:
        """The scope's waiting turns are now exactly ``turns`` (none: its rows go)."""
        ...

    async def load(self, scope: Scope) -> list[Turn]: ...

    async def scopes(self) -> list[Scope]: ...


class TurnSpools(Protocol):
    """The spool files beside a process: its own, and those of processes gone, to replay."""

    def own(self) -> SpooledTurns: ...

    def orphans(self) -> AbstractContextManager[list[SpooledTurns]]:
        """The files of processes gone, each held while the caller replays it."""
        ...

    def remove(self, spool: SpooledTurns) -> None:
        """An emptied file of a process gone."""
        ...

    async def set_aside(self, scope: Scope, turns: Sequence[Turn]) -> None:
        """Keep turns the database refuses in the set-aside file: never replayed, reached by forgetting."""
        ...

    async def drop_user(self, user_id: int) -> int:
        """Every spooled turn of the user, in every file (the operator's ``forget USER``)."""
        ...

    async def scrub(self, scope: Scope, keep: Callable[[Turn], bool]) -> None:
        """In every file, the scope's spooled turns are only those ``keep`` keeps (a forget)."""
        ...

    def close(self) -> None: ...
