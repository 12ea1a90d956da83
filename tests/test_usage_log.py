"""The SQLite usage log's shared writes: the calls of one moment are one transaction, each caller still
hears its own outcome, and a caller cancelled meanwhile costs the others nothing."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from companion.core.errors import StorageError
from companion.core.usage import UsageRecord
from companion.storage.sqlite import SQLiteStore

AT = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def record(n: int) -> UsageRecord:
    return UsageRecord(AT, "reply", "deepseek-chat", n, 1, None, None, 3.0)




class Counting:
    """Counts the store's whole-transaction hand-overs; ``fail`` makes the next ones raise."""

    def __init__(self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.fail = 0
        write = store.write_whole

        async def counted(work: Callable[[sqlite3.Connection], Any], **options: Any) -> Any:
            self.calls += 1
            if self.fail:
                self.fail -= 1
                raise StorageError("disk I/O error")
            return await write(work, **options)

        monkeypatch.setattr(store, "write_whole", counted)


async def test_the_calls_of_one_moment_share_one_write(
        sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(sqlite_store, monkeypatch)
    usage = sqlite_store.usage_log()
    await asyncio.gather(*(usage.add(record(n)) for n in range(50)))
    assert counting.calls == 1
    assert [r.prompt_tokens for _, r in await usage.page(0, 100)] == list(range(50))
    await usage.add(record(50))  # alone: a write of its own, at once
    assert counting.calls == 2 and len(await usage.page(0, 100)) == 51


async def test_a_failed_write_reaches_each_caller_and_the_next_batch_is_written(
        sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting(sqlite_store, monkeypatch)
    usage = sqlite_store.usage_log()
    counting.fail = 1
    outcomes = await asyncio.gather(*(usage.add(record(n)) for n in range(3)), return_exceptions=True)
    assert all(isinstance(o, StorageError) for o in outcomes)
    await asyncio.gather(*(usage.add(record(n)) for n in range(3, 5)))
    assert [r.prompt_tokens for _, r in await usage.page(0, 100)] == [3, 4]


async def test_a_cancelled_caller_leaves_the_others_rows_written(sqlite_store: SQLiteStore) -> None:
    usage = sqlite_store.usage_log()
    waiting = [asyncio.create_task(usage.add(record(n))) for n in range(4)]
    await asyncio.sleep(0)
    waiting[0].cancel()
    outcomes = await asyncio.gather(*waiting, return_exceptions=True)
    assert isinstance(outcomes[0], asyncio.CancelledError) and outcomes[1:] == [None, None, None]
    assert [r.prompt_tokens for _, r in await usage.page(0, 100)] == [0, 1, 2, 3]  # its row was already handed over
