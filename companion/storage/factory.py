"""One way to open a store: ``open_store(url)``, the URL's scheme naming the backend.

``sqlite:///<path>`` (a relative path after the three slashes, an absolute one after four, as SQLAlchemy
spells them) opens ``SQLiteStore``; ``memory://`` an empty ``InMemoryStore``; ``postgresql://`` (or
``postgres://``) ``PostgresStore``, whose module and asyncpg load only then. A new backend registers its
opener with ``register_backend`` and needs nothing else from the layers above, which import only this
module, ``base`` (the protocols) and ``maintenance`` (SQLite's file-level upkeep).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from companion.core.errors import ConfigError, UnfinishedMigrationError
from companion.core.setting import MIGRATING
from companion.core.spools import TurnSpools
from companion.storage.base import MemoryStore

# Takes what follows ``scheme://``; returns an open store.
Opener = Callable[[str], Awaitable[MemoryStore]]

_BACKENDS: dict[str, Opener] = {}


class UnknownStoreError(ConfigError):
    """A database URL that names no registered backend, or is not a URL at all."""


def register_backend(scheme: str, opener: Opener) -> None:
    """Make ``scheme://...`` URLs open through ``opener``; a second registration replaces the first."""
    _BACKENDS[scheme.lower()] = opener


def backends() -> list[str]:
    return sorted(_BACKENDS)


def scheme_of(url: str) -> str:
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise UnknownStoreError("DATABASE_URL is not a URL (expected scheme://..., e.g. sqlite:///data/memory.sqlite3)")
    return scheme.lower()


async def open_store(url: str, *, copying: bool = False) -> MemoryStore:
    """The store ``url`` names, open. Raises ``UnknownStoreError`` for a scheme no backend registered (the
    message names the scheme only: the rest of a URL may hold a password), and ``UnfinishedMigrationError``
    for the target of a ``migrate`` not yet verified, unless ``copying`` (the copy itself opens it)."""
    scheme = scheme_of(url)
    opener = _BACKENDS.get(scheme)
    if opener is None:
        raise UnknownStoreError(f"unknown database scheme {scheme!r} in DATABASE_URL; known: {', '.join(backends())}")
    store = await opener(url.partition("://")[2])
    if not copying:
        try:
            migrating = await store.get_setting(MIGRATING, None)
        except BaseException:
            await store.close()
            raise
        if migrating:  # part of a copy is no memory to answer from, nor to back up: the copy is finished first
            await store.close()
            raise UnfinishedMigrationError(f"the database is the target of an unfinished migrate ({migrating}): "
                                           "run the same `python bot.py migrate` again to finish it")
    return store


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def sqlite_path(url: str) -> Path | None:
    """The file a ``sqlite:///`` URL names, or None for a URL of another scheme."""
    if scheme_of(url) != "sqlite":
        return None
    rest = url.partition("://")[2]
    if not rest.startswith("/") or len(rest) < 2:
        raise UnknownStoreError("a sqlite DATABASE_URL is sqlite:///<path> (three slashes, four for an absolute path)")
    return Path(rest[1:])


async def _open_sqlite(rest: str) -> MemoryStore:
    from companion.storage.sqlite import SQLiteStore  # aiosqlite and the schema load only when asked for

    path = sqlite_path(f"sqlite://{rest}")
    assert path is not None
    return await SQLiteStore.open(path)


async def _open_memory(rest: str) -> MemoryStore:
    from companion.storage.inmemory import InMemoryStore

    if rest:
        raise UnknownStoreError("a memory DATABASE_URL is just memory:// (it names nothing)")
    return InMemoryStore()


async def _open_postgres(rest: str) -> MemoryStore:
    try:
        from companion.storage.postgres.store import open_postgres  # asyncpg is optional: loaded when asked for
    except ImportError as exc:
        raise UnknownStoreError(f"a postgresql DATABASE_URL needs asyncpg: pip install 'asyncpg~=0.32' "
                                f"({exc})") from None
    return await open_postgres(f"postgresql://{rest}")


def open_spools(directory: Path) -> TurnSpools:
    """The turn spool files under ``directory`` (``DATA_DIR/spool``), whatever the database."""
    from companion.storage.spool import Spools

    return Spools(directory)


register_backend("sqlite", _open_sqlite)
register_backend("memory", _open_memory)
register_backend("postgresql", _open_postgres)
register_backend("postgres", _open_postgres)
