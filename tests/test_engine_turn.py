"""``MemoryTurn``: a reply's unit of work. Opened by one store read, its calls reach no store while the
scope's caches stay loaded, and ``finish`` is one write carrying the accesses of what its context recalled.
An unread turn (its read failed) makes the same calls, each reading for itself. Counted on the real SQLite
store, wrapped to count every call."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import pytest

from companion.core.models import MemoryDraft, MemoryType, Scope, Validity
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from companion.storage.sqlite import SQLiteStore
from memory import MemoryEngine
from tests.support import CountingStore, make_settings

ME = Scope(5)
IN_GROUP = Scope(5, -1005)
NOW = datetime(2026, 3, 2, 12, tzinfo=UTC)
DOG = MemoryDraft("用户养了一只柯基叫豆豆", ["柯基", "豆豆", "养狗"], 80, Validity.PERMANENT, type=MemoryType.FACT)
TEA = MemoryDraft("回答时少用感叹号", ["感叹号"], 90, Validity.PERMANENT, type=MemoryType.INSTRUCTION)


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[tuple[MemoryEngine, CountingStore]]:
    settings = make_settings(tmp_path, embeddings="off")
    raw = await SQLiteStore.open(settings.db_path)
    store = CountingStore(raw)
    engine = await engine_on(cast(MemoryStore, store), settings, KeywordExtractor())
    await engine.ready()
    try:
        yield engine, store
    finally:
        await engine.close()
        await raw.close()


async def test_an_opened_turn_reads_once_and_writes_once(counted: tuple[MemoryEngine, CountingStore]) -> None:
    engine, store = counted
    [dog] = await engine.remember(ME, [DOG], NOW)
    await engine.open_turn(ME)  # the index loads with the first read; the turn below finds it loaded
    store.calls.clear()
    memory = await engine.open_turn(ME)
    context = await memory.context("豆豆今天咬坏了拖鞋", NOW, turn=1, cooldown={})
    assert [r.memory.id for r in context.recalled] == [dog]
    assert await memory.known_words(["柯基", "猫"]) == {"柯基"}
    assert [m.id for m in await memory.memories()] == [dog]
    assert +store.calls == Counter({"turn_context": 1})  # nothing between the read and the write
    await memory.finish(NOW, reply="豆豆还好吗？", shown=context.recalled)
    assert +store.calls == Counter({"turn_context": 1, "record_turn": 1})
    [stored] = await engine.memories(ME)
    assert (stored.access_count, stored.mention_count) == (1, 1)  # recalled by the context, mentioned by the reply


async def test_a_turn_records_accesses_only_of_what_its_context_recalled(
    counted: tuple[MemoryEngine, CountingStore]
) -> None:
    engine, _ = counted
    await engine.remember(ME, [DOG], NOW)
    memory = await engine.open_turn(ME)
    await memory.memories()  # looked at, not recalled for the reply
    await memory.finish(NOW, reply="今天天气不错")
    [stored] = await engine.memories(ME)
    assert stored.access_count == 0
    memory = await engine.open_turn(ME)
    context = await memory.context("豆豆", NOW, turn=1, cooldown={})
    await memory.finish(NOW, shown=context.recalled)
    await memory.finish(NOW, shown=context.recalled)  # a second finish records no access twice
    [stored] = await engine.memories(ME)
    assert stored.access_count == 1


async def test_an_unread_turn_reads_for_itself(counted: tuple[MemoryEngine, CountingStore]) -> None:
    engine, store = counted
    [dog] = await engine.remember(ME, [DOG], NOW)
    await engine.open_turn(ME)
    store.calls.clear()
    memory = engine.unread_turn(ME)
    assert memory.view is None
    context = await memory.context("豆豆今天咬坏了拖鞋", NOW, turn=1, cooldown={})
    assert [r.memory.id for r in context.recalled] == [dog]
    assert store.calls["turn_context"] == 0 and store.calls["change_counter"] >= 1  # brought up to date itself
    await memory.finish(NOW, shown=context.recalled)
    [stored] = await engine.memories(ME)
    assert stored.access_count == 1


async def test_an_unread_turn_sees_a_change_an_opened_turn_already_read(
    counted: tuple[MemoryEngine, CountingStore]
) -> None:
    engine, _ = counted
    await engine.remember(ME, [TEA], NOW)
    opened = await engine.open_turn(ME)
    [dog] = await engine.remember(ME, [DOG], NOW)  # written after the read (this process keeps the cache current)
    assert dog in {m.id for m in await opened.memories()}
    assert dog in {m.id for m in await engine.unread_turn(ME).memories()}


async def test_a_group_turn_borrows_private_memories_for_one_counter_read(
    counted: tuple[MemoryEngine, CountingStore]
) -> None:
    engine, store = counted
    [dog, tea] = await engine.remember(ME, [DOG, TEA], NOW)
    await engine.recall(ME, "豆豆", NOW)  # the private index loaded, as a private turn leaves it
    memory = await engine.open_turn(IN_GROUP)
    store.calls.clear()
    shared = await memory.shared(ME, "豆豆最近怎么样", NOW)
    assert [m.id for m in shared] == [dog, tea]  # recalled first, then the standing instructions
    assert +store.calls == Counter({"change_counter": 1})
    assert await memory.memories() == []  # the group scope's own: none
