"""Semantic recall end to end: the real engine on a real SQLite file, the real openai SDK against the fake
embeddings server. Memories are embedded when written (batched, outside the scope lock), found by meaning
where no keyword is shared, fused with keyword recall, removed with forget and cleanup, rebuilt by reindex;
a failing backend leaves keyword recall and one warning."""

from __future__ import annotations

import argparse
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from companion.config.settings import Settings
from companion.core.errors import ConfigError
from companion.core.models import MemoryDraft, MemoryType, Origin, Scope, Tier, Validity
from companion.engine.retrievers import DenseRetriever, document
from companion.engine.writer import BACKLOG_PER_WRITE
from companion.llm.embeddings import EmbeddingError
from companion.ops import operator_commands as commands
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore
from memory import MemoryEngine
from tests.fakes import FakeLLM
from tests.fakes.embeddings import FakeEmbeddings
from tests.support import close_rig, make_settings, open_rig

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ME = Scope(777)
OTHER = Scope(888)
KEYWORDS = KeywordExtractor()
# What the fake "model" knows that the keyword index does not.
SYNONYMS = {"狗狗": "小狗", "汪星人": "小狗", "退货": "退换"}


def dog() -> MemoryDraft:
    return MemoryDraft("我家小狗叫豆豆", ["小狗", "豆豆"], 80, Validity.PERMANENT, MemoryType.FACT)


def interview() -> MemoryDraft:
    return MemoryDraft("下周三要去字节面试", ["面试", "字节"], 80, Validity.DAYS_30, MemoryType.EVENT)


def tea() -> MemoryDraft:
    return MemoryDraft("喜欢喝珍珠奶茶", ["奶茶", "珍珠奶茶"], 70, Validity.PERMANENT, MemoryType.PREFERENCE,
                       origin=Origin.EXPLICIT)


def dense_settings(tmp_path: Path, fake: FakeEmbeddings, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "embedding_base_url": fake.base_url, "embedding_model": "fake-ngrams", "embedding_batch_size": 8,
        "embedding_min_similarity": 0.15, "embedding_timeout_seconds": 5, "embedding_query_timeout_seconds": 1,
    }
    values.update(overrides)
    return make_settings(tmp_path, **values)


@dataclass
class Setup:
    engine: MemoryEngine
    fake: FakeEmbeddings
    settings: Settings

    @property
    def dense(self) -> DenseRetriever:
        assert self.engine.dense is not None
        return self.engine.dense


@pytest.fixture
async def fake() -> AsyncIterator[FakeEmbeddings]:
    async with FakeEmbeddings(synonyms=SYNONYMS) as server:
        yield server


@pytest.fixture
async def setup(fake: FakeEmbeddings, tmp_path: Path) -> AsyncIterator[Setup]:
    settings = dense_settings(tmp_path, fake)
    engine = await open_engine(settings, KEYWORDS)
    try:
        yield Setup(engine, fake, settings)
    finally:
        await engine.close()


async def recalled_events(engine: MemoryEngine, text: str, scope: Scope = ME) -> list[str]:
    return [r.memory.event for r in await engine.recall(scope, text, NOW, limit=None)]


async def test_off_leaves_recall_to_keywords(tmp_path: Path) -> None:
    engine = await open_engine(make_settings(tmp_path, embeddings="off"), KEYWORDS)
    try:
        assert engine.dense is None
        await engine.remember(ME, [dog()], NOW)
        assert await recalled_events(engine, "狗狗最近怎么样") == []  # keywords alone miss the paraphrase
    finally:
        await engine.close()


async def test_memories_are_embedded_at_write_in_one_batch(setup: Setup) -> None:
    ids = await setup.engine.remember(ME, [dog(), interview(), tea()], NOW)
    assert len(setup.fake.requests) == 1 and len(setup.fake.requests[0]["input"]) == 3
    assert set(await setup.dense.vectors.hashes(ME, setup.dense.model)) == set(ids)
    assert any("小狗，豆豆" in text for text in setup.fake.inputs)  # keywords ride along with the event
    # Nothing changed: a second write of other memories embeds only those.
    await setup.engine.remember(ME, [MemoryDraft("周末去爬山", ["爬山"], 60)], NOW)
    assert len(setup.fake.requests[1]["input"]) == 1


async def test_a_paraphrase_is_recalled_by_meaning(setup: Setup) -> None:
    await setup.engine.remember(ME, [dog(), interview(), tea()], NOW)
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == ["我家小狗叫豆豆"]
    assert await recalled_events(setup.engine, "汪星人今天好乖") == ["我家小狗叫豆豆"]
    assert await recalled_events(setup.engine, "今天天气真好") == []  # nothing close enough
    # Another scope's memory is never a neighbour.
    assert await recalled_events(setup.engine, "狗狗最近怎么样", OTHER) == []


async def test_found_by_both_ranks_first_and_the_cap_holds(setup: Setup) -> None:
    await setup.engine.remember(ME, [dog(), interview(), tea()], NOW)
    recalled = await setup.engine.recall(ME, "面试完想喝奶茶", NOW)
    assert len(recalled) == 2
    assert {r.memory.event for r in recalled} == {"下周三要去字节面试", "喜欢喝珍珠奶茶"}


async def test_dense_hits_obey_importance_and_cooldown(setup: Setup) -> None:
    [low] = await setup.engine.remember(ME, [MemoryDraft("我家小狗叫豆豆", ["小狗"], 30)], NOW)
    assert await setup.engine.recall(ME, "狗狗最近怎么样", NOW) == []
    [mid] = await setup.engine.remember(ME, [MemoryDraft("邻居家的小狗很凶", ["邻居"], 80)], NOW)
    assert mid != low
    assert await setup.engine.recall(ME, "狗狗最近怎么样", NOW, turn=3, cooldown={mid: 1}) == []


async def test_embedding_calls_never_hold_the_scope_lock(setup: Setup) -> None:
    held: list[bool] = []
    setup.fake.observer = lambda texts: held.append(setup.engine.locks.held(ME))
    await setup.engine.remember(ME, [dog()], NOW)
    await setup.engine.recall(ME, "狗狗最近怎么样", NOW)
    assert held == [False, False]


async def test_forget_removes_the_vectors(setup: Setup) -> None:
    a, b, c = await setup.engine.remember(ME, [dog(), interview(), tea()], NOW)
    await setup.engine.forget(ME, [a])
    assert set(await setup.dense.vectors.hashes(ME, setup.dense.model)) == {b, c}
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == []
    await setup.engine.forget(ME)
    assert await setup.dense.vectors.count() == 0
    assert await setup.engine.forget(Scope(999)) == 0  # a scope never written has nothing to prune


async def test_vectors_of_memories_tombstoned_elsewhere_never_surface(setup: Setup) -> None:
    [a] = await setup.engine.remember(ME, [dog()], NOW)
    # Tombstoned by a path that does not prune: here another process's store on the same file.
    other = await SQLiteStore.open(setup.settings.db_path)
    try:
        await other.apply_changes(ME, NOW, forget=[a])
    finally:
        await other.close()
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == []
    assert await setup.dense.vectors.count() == 0  # removed on sight


async def test_cleanup_removes_the_vectors(setup: Setup) -> None:
    await setup.engine.remember(ME, [MemoryDraft("随口一提的小狗", ["小狗"], 9.0)], NOW)
    [kept] = await setup.engine.remember(ME, [interview()], NOW)
    assert await setup.dense.vectors.count() == 2
    report = await setup.engine.decay(NOW + timedelta(days=2))
    assert report.removed == 1
    assert set(await setup.dense.vectors.hashes(ME, setup.dense.model)) == {kept}


async def test_a_failing_backend_degrades_to_keywords_with_one_warning(
    fake: FakeEmbeddings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = await open_engine(dense_settings(tmp_path, fake, embedding_retry_after_seconds=0), KEYWORDS)
    try:
        await engine.remember(ME, [dog(), interview()], NOW)
        fake.fail_next(count=6, status=503)  # every query below fails
        caplog.set_level(logging.INFO, logger="companion.engine.retrievers")
        for _ in range(3):
            assert await recalled_events(engine, "字节的面试好紧张") == ["下周三要去字节面试"]
            assert await recalled_events(engine, "狗狗最近怎么样") == []
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "keywords only" in warnings[0].getMessage()
        assert await recalled_events(engine, "狗狗最近怎么样") == ["我家小狗叫豆豆"]  # the backend is back
        assert any("back" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    finally:
        await engine.close()


async def test_while_down_the_backend_is_left_alone_until_retry_time(setup: Setup) -> None:
    await setup.engine.remember(ME, [dog()], NOW)
    clock = [100.0]
    setup.dense.clock = lambda: clock[0]
    setup.fake.fail_next(count=1)
    before = len(setup.fake.requests)
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == []
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == []
    assert len(setup.fake.requests) == before + 1 and not setup.dense.available
    clock[0] += setup.dense.policy.retry_after
    assert await recalled_events(setup.engine, "狗狗最近怎么样") == ["我家小狗叫豆豆"]


async def test_a_write_while_down_keeps_the_memory_and_embeds_it_later(setup: Setup) -> None:
    setup.fake.fail_next(count=1, status=400)  # not retried by the SDK
    [first] = await setup.engine.remember(ME, [dog()], NOW)
    assert [m.id for m in await setup.engine.memories(ME)] == [first]
    assert await setup.dense.vectors.count() == 0
    setup.dense.retry_now()
    [second] = await setup.engine.remember(ME, [interview()], NOW)
    assert set(await setup.dense.vectors.hashes(ME, setup.dense.model)) == {first, second}


async def test_a_merged_memory_is_embedded_again(setup: Setup) -> None:
    [mid] = await setup.engine.remember(ME, [dog()], NOW)
    before = await setup.dense.vectors.hashes(ME, setup.dense.model)
    [same] = await setup.engine.remember(ME, [MemoryDraft("我家小狗叫豆豆", ["小狗", "豆豆", "柯基"], 85,
                                                          Validity.PERMANENT, MemoryType.FACT)], NOW)
    assert same == mid
    [memory] = await setup.engine.memories(ME)
    after = await setup.dense.vectors.hashes(ME, setup.dense.model)
    assert after != before and setup.fake.inputs[-1] == document(memory)


async def test_search_memories_with_filters(setup: Setup) -> None:
    dog_id, interview_id, tea_id = await setup.engine.remember(ME, [dog(), interview(), tea()], NOW)

    async def search(query: str, **filters: object) -> list[int]:
        return [m.id for m in await setup.engine.search(ME, query, NOW, **filters)]  # type: ignore[arg-type]

    assert await search("狗狗") == [dog_id]  # by meaning: no word of the query is in the memory
    assert await search("面试") == [interview_id]  # by words
    assert set(await search("")) == {dog_id, interview_id, tea_id}
    assert await search("", types={MemoryType.PREFERENCE}) == [tea_id]
    assert await search("", origins={Origin.EXPLICIT}) == [tea_id]
    assert set(await search("", tiers_={Tier.LONG})) == {dog_id, tea_id}
    assert await search("狗狗", types={MemoryType.EVENT}) == []
    assert await search("", since=NOW + timedelta(hours=1)) == []
    assert await search("", until=NOW) == [] and len(await search("", until=NOW + timedelta(hours=1))) == 3
    assert len(await search("", limit=2)) == 2
    assert await setup.engine.search(OTHER, "狗狗", NOW) == []


async def test_search_by_words_comes_first_then_meaning(setup: Setup) -> None:
    dog_id, = await setup.engine.remember(ME, [dog()], NOW)
    [corgi] = await setup.engine.remember(ME, [MemoryDraft("想再养一只狗狗", ["养狗"], 60)], NOW)
    assert [m.id for m in await setup.engine.search(ME, "狗狗", NOW)] == [corgi, dog_id]


async def test_search_works_without_a_backend(tmp_path: Path) -> None:
    engine = await open_engine(make_settings(tmp_path), KEYWORDS)
    try:
        ids = await engine.remember(ME, [dog(), interview()], NOW)
        assert [m.id for m in await engine.search(ME, "豆豆", NOW)] == [ids[0]]
        assert [m.tier for m in await engine.search(ME, "", NOW, tiers_={Tier.LONG})] == [Tier.LONG]
        assert await engine.search(ME, "狗狗", NOW) == []
    finally:
        await engine.close()


async def test_reindex_rebuilds_every_vector_with_progress(setup: Setup) -> None:
    ids = await setup.engine.remember(ME, [dog(), interview()], NOW)
    ids += await setup.engine.remember(OTHER, [tea()], NOW)
    await setup.dense.vectors.delete(ids)
    seen: list[tuple[int, int]] = []
    assert await setup.dense.reindex(progress=lambda done, total: seen.append((done, total))) == 3
    assert await setup.dense.vectors.count(setup.dense.model) == 3
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)
    assert await setup.dense.reindex() == 0  # everything current
    assert await setup.dense.reindex(force=True) == 3
    setup.fake.fail_next(count=1, status=400)
    with pytest.raises(EmbeddingError):
        await setup.dense.reindex(force=True)


async def test_reindex_command(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    await setup.engine.remember(ME, [dog(), interview()], NOW)
    await setup.engine.close()
    # Vectors of an earlier model are dropped; the current model's are rebuilt.
    assert await commands.run_reindex(setup.settings, argparse.Namespace(force=True)) == 0
    out = capsys.readouterr()
    assert "2 vectors written" in out.out
    with pytest.raises(ConfigError, match="EMBEDDING_BASE_URL"):
        await commands.run_reindex(make_settings(setup.settings.data_dir.parent / "other", embeddings="off"),
                                   argparse.Namespace(force=False))
    setup.engine = await open_engine(setup.settings, KEYWORDS)


async def test_a_chat_turn_carries_a_memory_found_by_meaning(
    fake_llm: FakeLLM, fake: FakeEmbeddings, tmp_path: Path
) -> None:
    rig = await open_rig(fake_llm, dense_settings(tmp_path, fake))
    try:
        # Medium-term: long-term memories reach the reply through the profile, not recall.
        sick = MemoryDraft("我家小狗豆豆这几天拉肚子", ["小狗", "豆豆", "拉肚子"], 80, Validity.DAYS_30)
        await rig.engine.remember(ME, [sick], rig.clock())
        await rig.chat.start(ME)
        reply = await rig.chat.reply(ME, "狗狗今天不太吃东西")
        assert reply.ok and reply.recalled
        assert "我家小狗豆豆这几天拉肚子" in str(fake_llm.chat_requests()[-1]["messages"])
    finally:
        await close_rig(rig)


async def test_a_local_model_that_cannot_load_leaves_keyword_recall(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="companion.engine.retrievers")
    engine = await open_engine(make_settings(tmp_path, embedding_local_model=str(tmp_path / "missing")),
                                     KEYWORDS)
    try:
        assert engine.dense is None
        assert any("semantic recall off" in r.getMessage() for r in caplog.records)
        await engine.remember(ME, [interview()], NOW)
        assert await recalled_events(engine, "字节的面试准备得怎么样") == ["下周三要去字节面试"]
    finally:
        await engine.close()


async def test_a_store_without_vectors_keeps_keyword_recall(
    fake: FakeEmbeddings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The capability, not the store's class, decides: a backend offering no vectors gets keyword recall."""
    settings = dense_settings(tmp_path, fake, database_url="memory://")
    with caplog.at_level(logging.WARNING):
        engine = await open_engine(settings, KEYWORDS)
    try:
        assert engine.dense is None
        assert "needs a store that keeps vectors" in caplog.text
        await engine.remember(ME, [dog()], NOW)
        assert await recalled_events(engine, "我的小狗呢") != []
    finally:
        await engine.close()


async def test_a_save_encodes_what_it_wrote_and_a_small_backlog_reindex_the_rest(setup: Setup) -> None:
    """A database written before semantic recall: the next save waits for its own memory and at most
    BACKLOG_PER_WRITE old ones, never for the whole scope (reindex encodes the rest)."""
    old = [MemoryDraft(f"以前记下的第{n}件事", [f"事{n}"], 60) for n in range(20)]
    await setup.engine.remember(ME, old, NOW, embed=False)
    [new] = await setup.engine.remember(ME, [dog()], NOW + timedelta(minutes=1))
    encoded = await setup.dense.vectors.hashes(ME, setup.dense.model)
    assert new in encoded and len(encoded) == 1 + BACKLOG_PER_WRITE
    assert await setup.dense.reindex() == 20 - BACKLOG_PER_WRITE
    assert len(await setup.dense.vectors.hashes(ME, setup.dense.model)) == 21


async def test_vectors_follow_a_forget_made_elsewhere_when_a_turn_reads_the_counter(setup: Setup) -> None:
    [a] = await setup.engine.remember(ME, [dog()], NOW)
    await setup.engine.open_turn(ME)
    # Tombstoned by another process's store on the same file, which does not prune.
    other = await SQLiteStore.open(setup.settings.db_path)
    try:
        await other.apply_changes(ME, NOW, forget=[a])
    finally:
        await other.close()
    assert await setup.dense.vectors.count() == 1
    await setup.engine.open_turn(ME)  # a turn's read of the counter
    assert await setup.dense.vectors.count() == 0, "the vectors follow the journal, before any recall"
