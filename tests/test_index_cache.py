"""The engine's index cache: bounded by the memories it holds (not by users), always keeps the scope being
read, follows writes, whoever made them (the change journal), and drops a scope's index on a scope-wide
change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from companion.core.models import Memory, MemoryDraft, MemoryType, Scope
from companion.engine.cache import IndexCache
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from companion.storage.inmemory import InMemoryStore
from memory import EngineConfig, MemoryEngine

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)
_KEYWORDS = KeywordExtractor()


async def _fill(store: MemoryStore, scope: Scope, count: int) -> None:
    engine = MemoryEngine(store, _KEYWORDS, EngineConfig(capacity=10_000))
    drafts = [MemoryDraft(f"第{n}件事是关于话题{n}", [f"话题{n}"], 60.0) for n in range(count)]
    await engine.remember(scope, drafts, NOW)


@pytest.fixture
async def store(any_store: MemoryStore) -> MemoryStore:
    """Every backend (``tests/conftest.py``), four users' memories in it."""
    _KEYWORDS.load()
    store = any_store
    for user, count in ((1, 30), (2, 30), (3, 30), (4, 100)):
        await _fill(store, Scope(user), count)
    return store


@pytest.mark.parametrize(("budget", "reads", "kept"), [
    (1_000, [1, 2, 3], {1, 2, 3}),          # everything fits
    (60, [1, 2, 3], {2, 3}),                 # the least recently read goes first
    (60, [1, 2, 1, 3], {1, 3}),              # a read refreshes a scope
    (50, [1, 2, 3, 4], {4}),                 # a scope bigger than the budget still stays while read
    (100, [4, 1], {1}),                      # ... and goes as soon as another one is read
])
async def test_bounded_by_memories_held(store: MemoryStore, budget: int, reads: list[int], kept: set[int]) -> None:
    cache = IndexCache(store, _KEYWORDS.keywords, max_memories=budget)
    for user in reads:
        await cache.index(Scope(user))
    assert {user for user in (1, 2, 3, 4) if cache.cached(Scope(user)) is not None} == kept
    assert cache.held == sum({1: 30, 2: 30, 3: 30, 4: 100}[user] for user in kept)


async def test_writes_reach_a_loaded_index_and_standing(store: MemoryStore) -> None:
    cache = IndexCache(store, _KEYWORDS.keywords)
    index = await cache.index(Scope(1))
    before = await cache.standing(Scope(1), NOW)
    draft = MemoryDraft("我养了一只猫", ["猫"], 80.0, type=MemoryType.FACT)
    [new] = await store.apply_changes(Scope(1), NOW, inserts=[draft])
    await cache.add(Scope(1), [new])
    assert new in index.memories
    assert "我养了一只猫" in (await cache.standing(Scope(1), NOW)).recent
    assert "我养了一只猫" not in before.recent
    cache.remove(Scope(1), new)
    assert new not in index.memories and "我养了一只猫" not in (await cache.standing(Scope(1), NOW)).recent


async def test_a_write_by_another_process_reaches_only_its_scopes_index(store: MemoryStore) -> None:
    """A write the cache was not told of (another process: an operator's command line) is read from the
    journal at the next read of that scope; other scopes stay cached as they are."""
    cache = IndexCache(store, _KEYWORDS.keywords)
    one, two = await cache.index(Scope(1)), await cache.index(Scope(2))
    [new] = await store.apply_changes(Scope(2), NOW, inserts=[MemoryDraft("我养了一只猫", ["猫"], 80.0)])
    gone = next(iter(two.memories))
    await store.apply_changes(Scope(2), NOW, forget=[gone])
    assert await cache.index(Scope(2)) is two  # brought up to date in place, not rebuilt
    assert new in two.memories and gone not in two.memories and cache.held == 60
    assert await cache.index(Scope(1)) is one


async def test_a_scope_wide_change_drops_the_scopes_index(store: MemoryStore) -> None:
    cache = IndexCache(store, _KEYWORDS.keywords)
    await cache.index(Scope(1))
    two = await cache.index(Scope(2))
    await store.decay_and_clean([Scope(2)], NOW + 3 * DAY)  # one DECAYED entry for the whole scope
    assert await cache.index(Scope(2)) is not two
    assert cache.cached(Scope(1)) is not None


async def test_memories_added_to_a_loaded_index_count_toward_the_budget(store: MemoryStore) -> None:
    """A new user's index is loaded empty and grows by writes: the growth counts, older scopes give way."""
    cache = IndexCache(store, _KEYWORDS.keywords, max_memories=60)
    await cache.index(Scope(1))
    await cache.index(Scope(5))  # never written: empty
    drafts = [MemoryDraft(f"新用户的第{n}件事", [f"事{n}"], 60.0) for n in range(40)]
    ids = await store.apply_changes(Scope(5), NOW, inserts=drafts)
    await cache.add(Scope(5), ids)
    assert cache.cached(Scope(1)) is None and cache.held == 40
    cache.remove(Scope(5), ids[0])
    assert cache.held == 39


async def test_a_write_merges_the_same_whether_or_not_the_index_is_loaded() -> None:
    """A scope that is chatting dedups against its loaded index; one that is not, against its rows (no
    index is built for it). Both must merge retold events alike."""
    _KEYWORDS.load()
    store = InMemoryStore()
    engine = MemoryEngine(store, _KEYWORDS, EngineConfig(capacity=10_000))
    batches = [
        [MemoryDraft("我养了一只猫叫咪咪", ["猫", "咪咪"], 60.0), MemoryDraft("周末去爬山", ["爬山", "周末"], 50.0)],
        [MemoryDraft("我养了一只猫叫咪咪。", ["猫"], 80.0), MemoryDraft("下周末又去爬山", ["爬山", "周末"], 40.0)],
        [MemoryDraft("喜欢喝拿铁", ["拿铁", "咖啡"], 55.0), MemoryDraft("咖啡要拿铁", ["咖啡", "拿铁"], 70.0)],
    ]
    chatting, quiet = Scope(1), Scope(2)
    for batch in batches:
        await engine.recall(chatting, "猫 爬山 咖啡", NOW)  # loads the chatting scope's index
        await engine.remember(chatting, [MemoryDraft(d.event, list(d.keywords), d.importance) for d in batch], NOW)
        await engine.remember(quiet, [MemoryDraft(d.event, list(d.keywords), d.importance) for d in batch], NOW)

    def shape(memories: list[Memory]) -> list[tuple[str, list[str], float]]:
        return [(m.event, m.keywords, m.importance) for m in memories]

    assert shape(await engine.memories(chatting)) == shape(await engine.memories(quiet))
    # The cat was retold and the coffee merged; next weekend's hike (下周末) is another one.
    assert len(await engine.memories(quiet)) == 4
