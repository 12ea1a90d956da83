"""The connection pool under the PostgreSQL store: opening (pool, session settings, migrations), short
transactions that turn driver errors into ``StorageError`` (those that change memories holding their
scopes' journal locks), and scope registration. ``store.PostgresStore`` builds the records' reads and
writes on it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Self

import asyncpg

from companion.core.errors import DatabaseBusyError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from companion.storage.postgres import journal, schema
from companion.storage.postgres.rows import key, second
from companion.storage.postgres.schema import Conn

log = logging.getLogger(__name__)

POOL_MIN = 1
POOL_MAX = 10
# Each session reads and writes UTC, whatever the server's default, and gives up on a lock rather than
# hold a turn for long.
SESSION = {"timezone": "UTC", "lock_timeout": "5000"}
_BUSY = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError, asyncpg.LockNotAvailableError,
         asyncpg.TooManyConnectionsError)
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


def pg_error(exc: BaseException) -> StorageError:
    """A driver error as the storage seam's typed error; the message never carries the URL."""
    if isinstance(exc, _BUSY):
        return DatabaseBusyError(f"database is busy: {type(exc).__name__}: {exc}")
    return StorageError(f"database error: {type(exc).__name__}: {exc}")


class Pool:
    """An asyncpg pool; every use is one short transaction on one pooled connection."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, dsn: str, *, min_size: int = POOL_MIN, max_size: int = POOL_MAX) -> Self:
        """Connect (``dsn``: a ``postgresql://`` URL; query parameters asyncpg does not know become session
        settings, ``?search_path=x`` for one) and bring the schema up to date."""
        try:
            pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, server_settings=SESSION)
        except (*DRIVER_ERRORS, ValueError) as exc:
            raise StorageError(f"cannot connect to PostgreSQL: {type(exc).__name__}: {exc}") from None
        store = cls(pool)
        try:
            async with pool.acquire() as conn:
                applied = await schema.migrate(conn, second(utcnow()))
        except BaseException as exc:
            await pool.close()
            if isinstance(exc, DRIVER_ERRORS):
                raise pg_error(exc) from exc
            raise
        if applied:
            log.info("PostgreSQL schema: applied %s", ", ".join(applied))
        return store

    async def close(self) -> None:
        await self._pool.close()

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Conn]:
        """A transaction; commit on success, roll back on any error."""
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                yield conn
        except DRIVER_ERRORS as exc:
            raise pg_error(exc) from exc

    @asynccontextmanager
    async def _changing(self, scopes: Iterable[Scope]) -> AsyncIterator[Conn]:
        """A transaction that changes the memories of ``scopes`` and journals it: their locks first."""
        async with self._tx() as conn:
            await journal.lock_scopes(conn, scopes)
            yield conn

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """One statement on its own (its own snapshot, no explicit transaction)."""
        try:
            async with self._pool.acquire() as conn:
                return list(await conn.fetch(sql, *args))
        except DRIVER_ERRORS as exc:
            raise pg_error(exc) from exc

    async def _value(self, sql: str, *args: Any) -> Any:
        rows = await self._fetch(sql, *args)
        return rows[0][0] if rows else None

    # ---- scopes ----------------------------------------------------------------------------------

    @staticmethod
    async def _ensure_scope(conn: Conn, scope: Scope, now: datetime) -> None:
        await conn.execute("INSERT INTO scopes (user_id, chat_id, created_at) VALUES ($1, $2, $3) "
                           "ON CONFLICT DO NOTHING", *key(scope), second(now))

    @staticmethod
    async def _known(conn: Conn, scope: Scope) -> bool:
        found = await conn.fetchval("SELECT 1 FROM scopes WHERE user_id = $1 AND chat_id = $2", *key(scope))
        return found is not None
