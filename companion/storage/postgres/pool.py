"""The connection pool under the PostgreSQL store: opening (pool, session settings, migrations), short
transactions that turn driver errors into ``StorageError`` (those that change memories holding their
scopes' journal locks), and scope registration. ``store.PostgresStore`` builds the records' reads and
writes on it. A lost connection (a restarted server, an ended backend) is retried (``reconnect``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Self

import asyncpg

from companion.core.errors import DatabaseBusyError, RefusedDataError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from companion.storage.postgres import journal, schema
from companion.storage.postgres.reconnect import (
    RECONNECT_SECONDS,
    CommitUnknownError,
    ConnectionLostError,
    is_lost,
    reconnecting,
    wrap_public_methods,
)
from companion.storage.postgres.row_codec import key, second
from companion.storage.postgres.schema import Conn

log = logging.getLogger(__name__)

POOL_MIN = 1
POOL_MAX = 10
# Each session reads and writes UTC, whatever the server's default, and gives up on a lock rather than
# hold a turn for long.
SESSION = {"timezone": "UTC", "lock_timeout": "5000"}
_BUSY = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError, asyncpg.LockNotAvailableError,
         asyncpg.TooManyConnectionsError)
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError)
# Asked on another connection after a COMMIT whose answer was lost: did that transaction commit?
_XID = "SELECT txid_current_if_assigned()"
_STATUS = "SELECT txid_status($1)"


def pg_error(exc: BaseException) -> StorageError:
    """A driver error as the storage seam's typed error; the message never carries the URL."""
    if isinstance(exc, _BUSY):
        return DatabaseBusyError(f"database is busy: {type(exc).__name__}: {exc}")
    if is_lost(exc):
        return ConnectionLostError(f"connection lost: {type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.DataError | asyncpg.IntegrityConstraintViolationError):
        return RefusedDataError(f"database refused the values: {type(exc).__name__}: {exc}")
    return StorageError(f"database error: {type(exc).__name__}: {exc}")


class Pool:
    """An asyncpg pool; every use is one short transaction on one pooled connection. The public methods
    of every subclass run again on a lost connection (``reconnect``)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        wrap_public_methods(cls)

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
        """A transaction; commit on success, roll back on any error. A connection lost during the COMMIT
        is settled by asking the server whether the transaction committed."""
        committed = False
        try:
            async with self._pool.acquire() as conn:
                transaction = conn.transaction()
                await transaction.start()
                try:
                    yield conn
                    xid = await conn.fetchval(_XID)
                except BaseException:
                    await _roll_back(transaction)
                    raise
                try:
                    await transaction.commit()
                except DRIVER_ERRORS as exc:
                    if not is_lost(exc) or xid is None or not await self._committed(int(xid), exc):
                        raise
                committed = True
        except DRIVER_ERRORS as exc:
            if not committed:
                raise pg_error(exc) from exc
            # Handing a dead connection back to the pool failed after the commit: the work is done.
            log.info("PostgreSQL connection lost after a commit: %s", type(exc).__name__)

    async def _committed(self, xid: int, lost: BaseException) -> bool:
        """Whether transaction ``xid``, whose COMMIT lost its connection, committed; asked on another
        connection until the server answers. Raises ``CommitUnknownError`` when it never does."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RECONNECT_SECONDS
        while loop.time() < give_up:
            try:
                async with self._pool.acquire() as conn:
                    status = str(await conn.fetchval(_STATUS, xid))
            except DRIVER_ERRORS as exc:
                if not is_lost(exc):
                    break
                status = "unreachable"
            if status in ("committed", "aborted"):
                log.info("PostgreSQL connection lost during a commit; the transaction %s", status)
                return status == "committed"
            await asyncio.sleep(0.1)  # the server is still ending the old backend, or restarting
        raise CommitUnknownError(f"connection lost during a commit, its outcome unknown: {type(lost).__name__}")

    @asynccontextmanager
    async def _changing(self, scopes: Iterable[Scope]) -> AsyncIterator[Conn]:
        """A transaction that changes the memories of ``scopes`` and journals it: their locks first."""
        async with self._tx() as conn:
            await journal.lock_scopes(conn, scopes)
            yield conn

    async def _fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """One statement on its own (its own snapshot, no explicit transaction); run again on a lost
        connection also when called from outside a store method (the vectors, the usage log, a stream)."""
        return await reconnecting(lambda: self._fetch_once(sql, *args))

    async def _fetch_once(self, sql: str, *args: Any) -> list[asyncpg.Record]:
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


async def _roll_back(transaction: Any) -> None:
    """Roll back after an error; on a lost connection there is nothing to do (the server rolls back) and
    the rollback's own error must not hide the one that ended the transaction."""
    try:
        await transaction.rollback()
    except DRIVER_ERRORS as exc:
        if not is_lost(exc):
            raise
