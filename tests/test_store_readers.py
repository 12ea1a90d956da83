"""The SQLite store's reads and writes queued on its connection's thread: each read sees every write committed
before it, while new scopes' tables are being made, and a write never hands a cursor back across threads."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from companion.core.models import MemoryDraft, MemoryType, Scope
from companion.storage.sqlite import SQLiteStore

NOW = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)




async def test_reads_see_each_committed_write_while_new_scopes_change_the_schema(sqlite_store: SQLiteStore) -> None:
    """New scopes' tables are created (and spare ones made) while every other scope is read, as at a busy
    start: no read fails, and each sees what was committed before it."""
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
