"""The SQLite store's read-only connections: reads see every committed write at once, never wait for the
writer, and survive the writer changing the schema under them (new scopes' memory tables)."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime

import pytest

from companion.core.models import MemoryDraft, MemoryType, Scope
from companion.storage.connection import SCHEMA_RETRIES, _read
from companion.storage.sqlite import SQLiteStore

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)




def _schema_changed() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database schema has changed")
    exc.sqlite_errorcode = sqlite3.SQLITE_SCHEMA  # as SQLite reports it
    return exc


def test_a_read_refused_for_a_schema_change_is_read_again() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    calls = []

    def work(c: sqlite3.Connection) -> int:
        calls.append(1)
        c.execute("BEGIN")
        if len(calls) < SCHEMA_RETRIES:
            raise _schema_changed()
        value = int(c.execute("SELECT 7").fetchone()[0])
        c.execute("COMMIT")
        return value

    assert _read(work, conn) == 7 and len(calls) == SCHEMA_RETRIES and not conn.in_transaction
    calls.clear()

    def always(c: sqlite3.Connection) -> int:
        calls.append(1)
        raise _schema_changed()

    with pytest.raises(sqlite3.OperationalError):
        _read(always, conn)
    assert len(calls) == SCHEMA_RETRIES

    def other(c: sqlite3.Connection) -> int:
        calls.append(1)
        raise sqlite3.OperationalError("disk I/O error")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        _read(other, conn)
    assert len(calls) == 1  # only a schema change is worth another try


async def test_reads_see_each_committed_write_while_new_scopes_change_the_schema(sqlite_store: SQLiteStore) -> None:
    """New scopes' tables are created (and spare ones made) on the writer while every other scope is read
    on the readers, as at a busy start: no read fails, and each sees what was committed before it."""
    async def newcomer(n: int) -> None:
        scope = Scope(10_000 + n)
        await sqlite_store.set_active(scope, True, NOW)
        draft = MemoryDraft(event=f"第{n}个用户养了一只猫", keywords=["猫"], importance=60.0, type=MemoryType.FACT)
        [handle] = await sqlite_store.apply_changes(scope, NOW, inserts=[draft])
        memories = await sqlite_store.fetch_memories(scope)
        assert [(m.id, m.event) for m in memories] == [(handle, draft.event)]
        view = await sqlite_store.turn_context(scope, events=3, turns=5)
        assert view.active

    await asyncio.gather(*(newcomer(n) for n in range(60)))


async def test_a_write_that_would_hand_back_a_cursor_is_refused_and_rolled_back(sqlite_store: SQLiteStore) -> None:
    """A cursor returned from the writer's thread would be finalised on the event loop's thread while that
    thread runs the next transaction (SQLite's "API misuse", seen once writes were pipelined)."""
    with pytest.raises(TypeError, match="cursor"):
        await sqlite_store.write_whole(lambda conn: conn.execute("INSERT INTO settings (name, owner, value) "
                                                          "VALUES ('weekly', 'u1', 'on')"))
    assert await sqlite_store.all_settings() == []
