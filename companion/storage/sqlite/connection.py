"""The SQLite connection under the store: opening, the process-wide lock, short transactions, and each
scope's memory table brought to the current version (registered, taken from the spares or created, or
upgraded through ``migrations``) before it is used. ``sqlite.SQLiteStore`` builds the records' reads and
writes on it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Self, TypeVar

import aiosqlite

from companion.core.errors import DatabaseBusyError, RefusedDataError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import to_db, utcnow
from companion.storage.sqlite import decay, migrations, spares
from companion.storage.sqlite.turnfirst import TurnFirstLock

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
ITER_CHUNK_SIZE = 64  # aiosqlite's default
# The schema of 10,000 scopes takes ~10 MB of pages; SQLite scans it on every CREATE TABLE (a spare table
# being made, or a new user's first write when none is ready), and with the default 2 MB cache that scan
# reads from the OS each time (~8 ms instead of ~2). The cache fills to its bound when the nightly backup
# reads every page: it counts in peak memory.
CACHE_KIB = 12 * 1024

T = TypeVar("T")


def storage_error(exc: sqlite3.Error) -> StorageError:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return DatabaseBusyError(f"database is locked: {exc}")
    if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError):
        return RefusedDataError(f"database refused the values: {exc}")
    return StorageError(f"database error: {exc}")


class Connection:
    """One long-lived aiosqlite connection in WAL mode; every use is one short transaction behind a lock."""

    def __init__(
        self, conn: aiosqlite.Connection, raw: sqlite3.Connection, path: Path, spare_tables: int = spares.SPARE_TABLES
    ) -> None:
        self._conn = conn
        # The same SQLite connection, for work sent whole to aiosqlite's thread (``write_whole``), under the lock.
        self._raw = raw
        self._lock = TurnFirstLock()
        # Scope key -> memory table version, for every registered scope (one small query at open).
        self._versions: dict[str, int] = {}
        # Changes made inside the open transaction: kept only once it commits, because a rollback takes
        # the CREATE TABLE (or upgrade) with it and a stale entry would make every later query fail.
        self._pending_versions: dict[str, int] = {}
        # Scope key -> table id, for scopes that took a spare table (the others have ``Scope.table``).
        self._table_ids: dict[str, int] = {}
        self._pending_table_ids: dict[str, int] = {}
        self._spare_target = spare_tables
        self._spares: list[int] = []  # spare table ids ready to take
        self._next_spare = 1
        self._spares_unsure = True  # read the list afresh (and drop old spares) before the next refill
        self._spares_wanted = False  # a new scope arrived in the open transaction: refill after it commits
        self._refill: asyncio.Task[None] | None = None
        self._closing = False
        self.path = path

    # ---- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path, *, create: bool = True, spare_tables: int = spares.SPARE_TABLES) -> Self:
        """Open (and with ``create``, create) the database. ``create=False`` is for read-only tools: a
        missing file is a StorageError, never a new empty database. ``spare_tables``: how many empty memory
        tables to keep ready for new scopes (made in the background after a new scope arrives)."""
        if not create and not path.is_file():
            raise StorageError(f"no database at {path}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            made: list[sqlite3.Connection] = []

            def connector() -> sqlite3.Connection:  # runs on aiosqlite's thread, as ``aiosqlite.connect`` does
                made.append(sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000,
                                            check_same_thread=False))
                return made[0]

            conn = await aiosqlite.Connection(connector, ITER_CHUNK_SIZE)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open the database at {path}: {exc}") from exc
        store = cls(conn, made[0], path, spare_tables)
        try:
            await store._setup()
        except BaseException:
            await conn.close()
            raise
        return store

    async def _setup(self) -> None:
        try:
            await self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await self._conn.execute("PRAGMA journal_mode = WAL")
            await self._conn.execute("PRAGMA synchronous = NORMAL")
            await self._conn.execute("PRAGMA foreign_keys = ON")
            # Deleted and overwritten text is zeroed in the file, not left in free space: forgetting reaches the disk.
            await self._conn.execute("PRAGMA secure_delete = ON")
            await self._conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
            await decay.ensure_math(self._conn)
            async with self.transaction() as conn:
                await migrations.migrate_shared(conn, to_db(utcnow()))
                cursor = await conn.execute("SELECT key, table_version, table_id FROM scopes")
                for key, version, table_id in await cursor.fetchall():
                    self._versions[str(key)] = int(version)
                    if table_id is not None:
                        self._table_ids[str(key)] = int(table_id)
                self._spares, self._next_spare = await spares.listed(conn)
        except sqlite3.Error as exc:  # callers above storage know only StorageError
            raise storage_error(exc) from exc

    async def close(self) -> None:
        self._closing = True
        if self._refill is not None:
            await asyncio.gather(self._refill, return_exceptions=True)  # it stops after its current table
        await self._conn.close()

    async def read(self, work: Callable[[sqlite3.Connection], T], *, first: bool = False) -> T:
        """``work`` on the connection's thread, queued under the lock and awaited after it: the thread runs its
        queue in order, so whatever takes the lock next comes after it, and nothing waits for the lock to come
        back through a busy event loop (held across the trip, a turn's read waited p50 0.4 s under load).
        Several statements read one snapshot when ``work`` opens a transaction itself (``write_whole`` wraps
        its work in one). ``first``: work a reply waits for (``TurnFirstLock``)."""
        async with self._lock.first() if first else self._lock:
            done = self._enqueue(work)
        try:
            return await done
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    @asynccontextmanager
    async def transaction(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        """A transaction behind the process-wide lock; commit on success, roll back on any error.

        Writes take the write lock up front (BEGIN IMMEDIATE) so they fail fast instead of deadlocking
        mid-way; reads use a deferred BEGIN, which WAL lets through while another process writes."""
        async with self._lock:
            try:
                await self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise storage_error(exc) from exc
            self._forget_pending()
            try:
                yield self._conn
            except BaseException:
                self._forget_pending()
                await self._rollback()
                raise
            try:
                await self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._forget_pending()
                await self._rollback()
                raise storage_error(exc) from exc
            self._versions.update(self._pending_versions)
            self._table_ids.update(self._pending_table_ids)
            wanted = self._spares_wanted
            self._forget_pending()
        if wanted:
            self._fill_spares_soon()

    async def write_whole(self, work: Callable[[sqlite3.Connection], T], *, first: bool = False) -> T:
        """A write transaction whose statements need nothing from the event loop between them (``work``,
        synchronous, on the plain connection), sent whole to the connection's thread: one hand-over instead
        of one per statement (BEGIN, each statement, COMMIT), each ~0.1-0.3 ms of a busy bot's CPU
        (docs/benchmarks-history.md section 15, round 2). Committed before this returns. aiosqlite's own queue (not
        ``asyncio.to_thread``) keeps it in line with every other statement on that thread, so a caller
        cancelled meanwhile cannot let the next transaction start before this one has ended; and a caller
        cancelled before the COMMIT gets it rolled back, as a transaction sent statement by statement was.
        ``first``: a write a reply waits for, queued ahead of background work (``TurnFirstLock``)."""
        abandoned = threading.Event()
        try:
            return await self.read(functools.partial(_whole_transaction, work=work, abandoned=abandoned), first=first)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    def _enqueue(self, work: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """``work`` on the plain connection, put in aiosqlite's queue now (its ``_execute`` queues only once
        awaited); the future tells the outcome."""
        conn: Any = self._conn  # aiosqlite's queue and running flag are not public
        if not conn._running or conn._connection is None:
            raise StorageError("the database is closed")
        done: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        conn._tx.put_nowait((done, functools.partial(work, self._raw)))
        return done

    async def _on_thread(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` on the plain connection, run on aiosqlite's thread in its queue; the caller holds the lock."""
        run: Callable[..., Any] = self._conn._execute  # aiosqlite offers no public way to run a function there
        result: T = await run(work, self._raw)
        return result

    def _forget_pending(self) -> None:
        self._pending_versions.clear()
        self._pending_table_ids.clear()
        self._spares_wanted = False

    async def _rollback(self) -> None:
        # SQLite rolls back by itself on some errors (disk full, I/O); a second ROLLBACK would then fail
        # with "no transaction is active" and hide the error that matters.
        if self._conn.in_transaction:
            await self._conn.execute("ROLLBACK")

    @asynccontextmanager
    async def _tx(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        try:
            async with self.transaction(write=write) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    async def _select(self, sql: str, params: Sequence[object] = (), *, first: bool = False) -> list[Any]:
        """One statement on its own (SQLite's autocommit: it reads one consistent snapshot) in one trip to the
        connection's thread (``read``); a write that needs no transaction around it too (``touch``)."""
        return await self.read(lambda conn: conn.execute(sql, params).fetchall(), first=first)

    # ---- scopes and their tables -----------------------------------------------------------------

    def _version(self, scope: Scope) -> int | None:
        key = scope.key
        return self._pending_versions.get(key, self._versions.get(key))

    def memory_table(self, scope: Scope) -> str:
        """The name of the scope's memory table (whether it exists yet or not)."""
        return self._table_of(scope.key)

    def _table_of(self, key: str) -> str:
        table_id = self._pending_table_ids.get(key, self._table_ids.get(key))
        return spares.table_name(key, table_id)

    async def _ensure_scope(self, conn: aiosqlite.Connection, scope: Scope, now: datetime) -> None:
        """Register the scope and bring its table to the current version, inside ``conn``'s transaction."""
        version = self._version(scope)
        if version == migrations.CURRENT_TABLE_VERSION:
            return
        if version is None:
            if await self._register(conn, scope, now):
                return
            cursor = await conn.execute("SELECT table_version, table_id FROM scopes WHERE key = ?", (scope.key,))
            row = await cursor.fetchone()  # registered by another process meanwhile
            version = int(row[0]) if row else 0
            if row is not None and row[1] is not None:
                self._pending_table_ids[scope.key] = int(row[1])
        if version == 0:
            await migrations.create_memory_table(conn, self._table_of(scope.key), key=scope.key)
        elif migrations.bulk_from(version):
            # Its steps cost one call however many tables: take every table they are due on now, or a
            # loop over scopes (decay, backup) would pay that call once per table.
            await self._upgrade(conn, [(scope.key, version), *self._bulk_stale(exclude=scope.key)])
            return
        else:
            await migrations.upgrade_memory_table(conn, scope.key, self._table_of(scope.key), version)
        self._pending_versions[scope.key] = migrations.CURRENT_TABLE_VERSION

    async def _register(self, conn: aiosqlite.Connection, scope: Scope, now: datetime) -> bool:
        """Register a new scope with a table at the current version: a spare one if there is one (two
        short statements), else a new one. False if another process registered it meanwhile."""
        table_id = self._spares.pop(0) if self._spares else None
        if table_id is not None and not await spares.take(conn, table_id):
            table_id = None  # another process took it; the next refill reads the list afresh
            self._spares_unsure = True
        cursor = await conn.execute(
            "INSERT OR IGNORE INTO scopes (key, user_id, chat_id, created_at, table_version, table_id) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (scope.key, scope.user_id, scope.chat_id, to_db(now), migrations.CURRENT_TABLE_VERSION, table_id),
        )
        if cursor.rowcount != 1:
            if table_id is not None:
                await spares.give_back(conn, table_id)
                self._spares.insert(0, table_id)
            return False
        if table_id is None:
            await migrations.create_memory_table(conn, scope.table)
        else:
            self._pending_table_ids[scope.key] = table_id
        self._pending_versions[scope.key] = migrations.CURRENT_TABLE_VERSION
        self._spares_wanted = True
        return True

    def _fill_spares_soon(self) -> None:
        if self._spare_target > 0 and not self._closing and (self._refill is None or self._refill.done()):
            self._refill = asyncio.get_running_loop().create_task(self._fill_spares(), name="spare-tables")

    async def _fill_spares(self) -> None:
        """Make spare tables up to the target, one short transaction (and one trip to the database
        thread) each, so a turn waits at most for one ``CREATE TABLE``. A failure costs only speed (new
        scopes create their own tables): one warning line, and the next refill reads the list afresh."""
        try:
            if self._spares_unsure:  # once per process, and after a surprise: otherwise one trip per spare
                async with self._tx() as conn:
                    await spares.drop_stale(conn)
                    self._spares, self._next_spare = await spares.listed(conn)
                self._spares_unsure = False
            while len(self._spares) < self._spare_target and not self._closing:
                async with self._lock:
                    await self._script(spares.make_script(self._next_spare))
                self._spares.append(self._next_spare)
                self._next_spare += 1
        except StorageError as exc:
            self._spares_unsure = True
            log.warning("spare memory tables not made: %s", exc)

    def _bulk_stale(self, exclude: str | None = None) -> list[tuple[str, int]]:
        return [(k, v) for k, v in self._versions.items()
                if k != exclude and k not in self._pending_versions and v < migrations.CURRENT_TABLE_VERSION
                and migrations.bulk_from(v)]

    async def _upgrade(self, conn: aiosqlite.Connection, tables: Sequence[tuple[str, int]]) -> None:
        await migrations.upgrade_memory_tables(conn, [(k, self._table_of(k), v) for k, v in tables])
        self._pending_versions.update((k, migrations.CURRENT_TABLE_VERSION) for k, _ in tables)

    async def _readable(self, scope: Scope) -> bool:
        """Whether the scope has a table to read; a stale one is upgraded first (its own write)."""
        version = self._version(scope)
        if version is None:
            return False
        if version < migrations.CURRENT_TABLE_VERSION:
            async with self._tx() as conn:
                await self._ensure_scope(conn, scope, utcnow())
        return True

    async def upgrade_stale(self, limit: int = 50) -> int:
        """Upgrade up to ``limit`` memory tables left at an old version; returns how many remain. For a
        background task: each batch is one short transaction. Tables whose remaining steps run for many
        tables at once (``migrations.bulk_from``) all go in one batch, however many."""
        stale = [(k, v) for k, v in self._versions.items() if v < migrations.CURRENT_TABLE_VERSION]
        batch = self._bulk_stale() or stale[:limit]
        if batch:
            async with self._tx() as conn:
                await self._upgrade(conn, batch)
        return len(stale) - len(batch)

    async def ensure_scope(self, scope: Scope, now: datetime) -> None:
        if self._version(scope) == migrations.CURRENT_TABLE_VERSION:
            return
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)

    async def _script(self, script: str) -> None:
        """A script that opens and commits its own transaction, under the caller's hold of the lock."""
        try:
            await self._conn.executescript(script)
        except sqlite3.Error as exc:
            await self._rollback()  # a failed statement leaves the script's transaction open
            raise storage_error(exc) from exc


class _Abandoned(Exception):
    """The caller of ``Connection.write_whole`` was cancelled before the COMMIT."""


def _whole_transaction(
    raw: sqlite3.Connection, work: Callable[[sqlite3.Connection], T], abandoned: threading.Event
) -> T:
    """``Connection.write_whole`` on the connection's thread: BEGIN IMMEDIATE, ``work``, COMMIT, or ROLLBACK
    on any error or when the caller is gone (unless SQLite already rolled back by itself, see
    ``Connection._rollback``)."""
    raw.execute("BEGIN IMMEDIATE")
    try:
        result = work(raw)
        if isinstance(result, sqlite3.Cursor):
            # Finalised wherever its last reference goes (the event loop's thread), it would reset its
            # statement while this thread runs the next transaction: SQLite's "API misuse".
            raise TypeError("write_whole's work must not return a cursor")
        if abandoned.is_set():
            raise _Abandoned  # nobody awaits the result; the caller's CancelledError is what it sees
        raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
    return result
