"""The LLM usage table: one row per model call (purpose, tokens cached and not, latency), and the
per-day, per-purpose report over it.

The table and its migration set (``USAGE``, registered with ``migrations``) are this module's; ``sqlite``
imports it so every store has the table. Rows are written after the model answered, never across its
await, and the calls that finish at the same moment share one short transaction (``add``).
Rows come in as the LLM client's own ``UsageRecord`` (``companion.core.usage``): ``add`` is the client's
usage sink.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from companion.core.errors import StorageError
from companion.core.timeutil import from_db, to_db
from companion.core.usage import UsageRecord
from companion.storage.base import UsageCell
from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.sqlite.connection import storage_error
from companion.storage.sqlite.migrations import register

if TYPE_CHECKING:  # a run-time import would be circular: store -> usage
    from companion.storage.sqlite.store import SQLiteStore

USAGE = MigrationSet("usage", (
    Migration("0001_llm_usage", """
    CREATE TABLE llm_usage (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        purpose TEXT NOT NULL,
        model TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cache_hit_tokens INTEGER,
        cache_miss_tokens INTEGER,
        latency_ms REAL NOT NULL,
        ok INTEGER NOT NULL,
        tool_calls INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX llm_usage_at ON llm_usage (at)
    """),
))
register(USAGE)

ADD = ("INSERT INTO llm_usage (at, purpose, model, prompt_tokens, completion_tokens, cache_hit_tokens, "
       "cache_miss_tokens, latency_ms, ok, tool_calls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


Row = tuple[object, ...]


def _add(conn: sqlite3.Connection, rows: list[Row]) -> None:
    conn.executemany(ADD, rows)


class SQLiteUsageLog:
    """``UsageLog`` in the store's own database (table ``llm_usage``)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self._rows: list[Row] = []  # the next batch's, not yet handed to the connection's thread
        self._batch: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None

    async def add(self, record: UsageRecord) -> None:
        """Returns once the row is committed. The calls of one moment (a batch of replies answered together
        under load) share one transaction: one hand-over to the connection's thread for all of them, where
        there was one per model call, the bot's second write per message."""
        self._rows.append((to_db(record.at), record.purpose, record.model, record.prompt_tokens,
                           record.completion_tokens, record.cache_hit_tokens, record.cache_miss_tokens,
                           record.latency_ms, int(record.ok), record.tool_calls))
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
            self._writer = asyncio.create_task(self._write(self._batch), name="usage-log")
        # Shielded: one caller cancelled must not cancel the write the others wait for.
        await asyncio.shield(self._batch)

    async def _write(self, batch: asyncio.Future[None]) -> None:
        try:
            try:
                await asyncio.sleep(0)  # the calls answered in this turn of the event loop join the batch
            finally:
                rows, self._rows, self._batch = self._rows, [], None
            await self._store.write_whole(functools.partial(_add, rows=rows), first=True)  # a reply waits
        except asyncio.CancelledError:
            # The loop is stopping: the callers hear that their rows were not written, not that they were
            # cancelled themselves.
            batch.set_exception(StorageError("usage rows not written: the event loop is stopping"))
            batch.exception()
            raise
        except BaseException as exc:  # each caller gets it, as from its own write (the LLM client logs it)
            batch.set_exception(exc)
            batch.exception()  # retrieved: callers cancelled meanwhile leave nobody to read it
        else:
            batch.set_result(None)

    async def report(self, since: datetime, offset: timedelta) -> list[UsageCell]:
        """Calls since ``since`` by local day and purpose, oldest day first. Days are cut at ``offset``
        from UTC (the zone's offset now; a day that spans a DST change is cut at the current offset)."""
        seconds = int(offset.total_seconds())
        try:
            async with self._store.transaction(write=False) as conn:
                cursor = await conn.execute(
                    f"SELECT date(at, '{seconds:+d} seconds') AS day, purpose, count(*), sum(1 - ok), "
                    "sum(prompt_tokens), sum(completion_tokens), coalesce(sum(cache_hit_tokens), 0), "
                    "coalesce(sum(cache_miss_tokens), 0), avg(latency_ms), sum(tool_calls) "
                    "FROM llm_usage WHERE at >= ? GROUP BY day, purpose ORDER BY day, purpose",
                    (to_db(since),),
                )
                rows = await cursor.fetchall()
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc
        return [UsageCell(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), int(r[6]), int(r[7]),
                          round(float(r[8]), 1), int(r[9])) for r in rows]

    async def page(self, after: int, limit: int) -> list[tuple[int, UsageRecord]]:
        try:
            async with self._store.transaction(write=False) as conn:
                cursor = await conn.execute(
                    "SELECT id, at, purpose, model, prompt_tokens, completion_tokens, cache_hit_tokens, "
                    "cache_miss_tokens, latency_ms, ok, tool_calls FROM llm_usage WHERE id > ? ORDER BY id LIMIT ?",
                    (after, limit))
                rows = await cursor.fetchall()
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc
        return [(int(r[0]), UsageRecord(from_db(str(r[1])), str(r[2]), str(r[3]), int(r[4]), int(r[5]),
                                     None if r[6] is None else int(r[6]), None if r[7] is None else int(r[7]),
                                     float(r[8]), bool(r[9]), int(r[10]))) for r in rows]


