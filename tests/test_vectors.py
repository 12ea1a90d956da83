"""Memory vectors in the memories' SQLite file: written only for active memories, searched per scope and
model, removed with forgotten and cleaned-up memories, carried by the snapshot backup. Both scorers run
the same tests: sqlite-vec where the extension loads on this Python's SQLite (skipped otherwise), and the
plain-Python dot product that stands in for it."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.core.models import MemoryDraft, Scope, Validity
from companion.storage.sqlite import SQLiteStore
from companion.storage.sqlite.vectors import VectorRow, VectorStore, _Matrix, top_k
from companion.storage.vectormath import pack, unpack
from tests.fakes.embeddings import ngram_vector

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ALICE = Scope(101)
BOB = Scope(202)
MODEL = "fake-model"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(tmp_path / "data" / "memory.sqlite3")
    yield opened
    await opened.close()


def cosine_distance(a: bytes, b: bytes) -> float:
    """sqlite-vec's ``vec_distance_cosine`` as documented (1 - cosine similarity), for SQLite builds that
    cannot load the extension: the SQL path then runs against this stand-in."""
    x, y = unpack(a), unpack(b)
    norms = (sum(v * v for v in x) * sum(v * v for v in y)) ** 0.5
    return float(1.0 - sum(p * q for p, q in zip(x, y, strict=True)) / norms)


@pytest.fixture(params=["python", "sqlite-vec", "sqlite-vec-sql"])
async def vectors(request: pytest.FixtureRequest, store: SQLiteStore) -> AsyncIterator[VectorStore]:
    if request.param == "sqlite-vec-sql":
        async with store.transaction(write=False) as conn:
            await conn.create_function("vec_distance_cosine", 2, cosine_distance, deterministic=True)
        yield VectorStore(store, sqlite_vec=True)
        return
    opened = await VectorStore.open(store, try_sqlite_vec=request.param == "sqlite-vec")
    try:
        if opened.backend != request.param:
            pytest.skip("sqlite-vec cannot load here: no extension loading in this Python's SQLite and "
                        "neither sqlean.py nor pysqlite3-binary with sqlite-vec installed "
                        "(pip install sqlean.py)")
        yield opened
    finally:
        await opened.close()


async def test_without_an_extension_driver_scoring_runs_in_python(store: SQLiteStore) -> None:
    opened = await VectorStore.open(store, drivers=())
    try:
        # This Python's own sqlite3 decides: with extension loading it is sqlite-vec on the store's connection.
        can_load = hasattr(sqlite3.Connection, "enable_load_extension")
        assert opened.driver == "sqlite3"
        assert opened.backend in ({"python", "sqlite-vec"} if can_load else {"python"})
    finally:
        await opened.close()


async def test_an_unknown_driver_is_skipped(store: SQLiteStore) -> None:
    opened = await VectorStore.open(store, drivers=("no_such_driver_module",))
    try:
        assert opened.driver == "sqlite3"
    finally:
        await opened.close()


async def write(store: SQLiteStore, scope: Scope, *events: str, importance: float = 80.0) -> list[int]:
    drafts = [MemoryDraft(event=e, keywords=[e[:2]], importance=importance, validity=Validity.DAYS_30)
              for e in events]
    return await store.apply_changes(scope, NOW, inserts=drafts)


def row(handle: int, text: str) -> VectorRow:
    return VectorRow(handle, text, ngram_vector(text))


def test_vectors_pack_as_float32() -> None:
    assert list(unpack(pack([0.5, -0.25, 1.0]))) == [0.5, -0.25, 1.0]
    assert len(pack([0.0] * 1024)) == 4096


async def test_nearest_ranks_by_cosine_within_one_scope(store: SQLiteStore, vectors: VectorStore) -> None:
    texts = ["我家小狗叫豆豆", "下周三要去面试", "喜欢喝珍珠奶茶"]
    ids = await write(store, ALICE, *texts)
    [bob_id] = await write(store, BOB, "小狗豆豆生病了")
    assert await vectors.put(ALICE, MODEL, [row(h, t) for h, t in zip(ids, texts, strict=True)], NOW) == 3
    await vectors.put(BOB, MODEL, [row(bob_id, "小狗豆豆生病了")], NOW)

    hits = await vectors.nearest(ALICE, MODEL, ngram_vector("小狗豆豆怎么样了"), 2)
    assert hits[0][0] == ids[0]
    assert len(hits) == 2 and bob_id not in {h for h, _ in hits}
    assert hits[0][1] == pytest.approx(sum(a * b for a, b in zip(
        ngram_vector("小狗豆豆怎么样了"), ngram_vector("我家小狗叫豆豆"), strict=True)), abs=1e-5)
    assert hits[0][1] >= hits[1][1]


async def test_other_models_and_sizes_are_never_compared(store: SQLiteStore, vectors: VectorStore) -> None:
    [mid] = await write(store, ALICE, "我家小狗叫豆豆")
    await vectors.put(ALICE, "old-model", [row(mid, "我家小狗叫豆豆")], NOW)
    assert await vectors.nearest(ALICE, MODEL, ngram_vector("小狗"), 5) == []
    assert await vectors.nearest(ALICE, "old-model", ngram_vector("小狗", dim=64), 5) == []
    assert await vectors.drop_other_models(MODEL) == 1
    assert await vectors.count() == 0


async def test_a_vector_is_written_only_for_an_active_memory(store: SQLiteStore, vectors: VectorStore) -> None:
    live, gone = await write(store, ALICE, "我家小狗叫豆豆", "下周三要去面试")
    await store.apply_changes(ALICE, NOW, forget=[gone])
    written = await vectors.put(ALICE, MODEL, [row(live, "a"), row(gone, "b"), row(999_999, "c")], NOW)
    assert written == 1 and set(await vectors.hashes(ALICE, MODEL)) == {live}


async def test_put_replaces_a_memorys_vector(store: SQLiteStore, vectors: VectorStore) -> None:
    [mid] = await write(store, ALICE, "我家小狗叫豆豆")
    await vectors.put(ALICE, MODEL, [VectorRow(mid, "h1", ngram_vector("一"))], NOW)
    await vectors.put(ALICE, MODEL, [VectorRow(mid, "h2", ngram_vector("小狗"))], NOW)
    assert await vectors.hashes(ALICE, MODEL) == {mid: "h2"} and await vectors.count(MODEL) == 1


async def test_delete_and_prune(store: SQLiteStore, vectors: VectorStore) -> None:
    a, b, c = await write(store, ALICE, "我家小狗叫豆豆", "下周三要去面试", "喜欢喝珍珠奶茶")
    [faint] = await write(store, BOB, "随口一提的小事", importance=9.0)
    await vectors.put(ALICE, MODEL, [row(a, "a"), row(b, "b"), row(c, "c")], NOW)
    await vectors.put(BOB, MODEL, [row(faint, "d")], NOW)

    assert await vectors.delete([a]) == 1
    # Forgotten without its vector deleted (a crash in between), and tombstoned by the nightly cleanup.
    await store.apply_changes(ALICE, NOW, forget=[b])
    _, removed = await store.decay_and_clean([ALICE, BOB], NOW + timedelta(days=3))
    assert removed == 1
    assert await vectors.prune() == 2
    assert set(await vectors.hashes(ALICE, MODEL)) == {c} and await vectors.hashes(BOB, MODEL) == {}


async def test_the_snapshot_carries_the_vectors(store: SQLiteStore, vectors: VectorStore, tmp_path: Path) -> None:
    [mid] = await write(store, ALICE, "我家小狗叫豆豆")
    await vectors.put(ALICE, MODEL, [row(mid, "我家小狗叫豆豆")], NOW)
    target = tmp_path / "snapshot.sqlite3"
    await store.snapshot(target)
    conn = sqlite3.connect(target)
    try:
        [(handle, blob)] = conn.execute("SELECT handle, vector FROM memory_vectors").fetchall()
    finally:
        conn.close()
    assert handle == mid and list(unpack(blob)) == pytest.approx(ngram_vector("我家小狗叫豆豆"), abs=1e-6)


async def test_an_extension_driver_scores_on_its_own_read_only_connection(store: SQLiteStore) -> None:
    pytest.importorskip("sqlite_vec")
    pytest.importorskip("sqlean")
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        pytest.skip("this Python's sqlite3 loads extensions itself")
    opened = await VectorStore.open(store, drivers=("sqlean",))
    try:
        assert (opened.backend, opened.driver) == ("sqlite-vec", "sqlean")
        [handle] = await write(store, ALICE, "我家小狗叫豆豆")
        await opened.put(ALICE, MODEL, [row(handle, "我家小狗叫豆豆")], NOW)  # written after it opened
        hits = await opened.nearest(ALICE, MODEL, ngram_vector("小狗豆豆"), 3)
        assert [h for h, _ in hits] == [handle]
    finally:
        await opened.close()


async def test_a_scope_is_read_again_only_after_its_vectors_changed_in_any_connection(
        store: SQLiteStore, tmp_path: Path) -> None:
    """The numpy search keeps a scope's matrix while the scope's version stands: a second search reads one
    row, not every vector; a vector added or deleted by another connection (another process) is seen by the
    next search."""
    vectors = await VectorStore.open(store, try_sqlite_vec=False)
    a, b = await write(store, ALICE, "我家小狗叫豆豆", "下周三要去面试")
    await vectors.put(ALICE, MODEL, [row(a, "我家小狗叫豆豆"), row(b, "下周三要去面试")], NOW)
    reads: list[str] = []
    async with store.transaction(write=False) as conn:
        await conn.set_trace_callback(lambda sql: reads.append(sql) if "SELECT handle, vector" in sql else None)
    query = ngram_vector("小狗豆豆怎么样了")
    assert [h for h, _ in await vectors.nearest(ALICE, MODEL, query, 5)] == [a, b]
    assert [h for h, _ in await vectors.nearest(ALICE, MODEL, query, 5)] == [a, b]
    assert len(reads) == 1, "an unchanged scope was read again"

    [c] = await write(store, ALICE, "小狗豆豆今天打了疫苗")
    other = sqlite3.connect(store.path)  # as another process writes: the triggers bump the version there too
    try:
        with other:
            other.execute(
                "INSERT INTO memory_vectors (handle, scope_key, model, dim, text_hash, vector, updated_at) "
                "VALUES (?, ?, ?, ?, 'h', ?, '2025-12-23')",
                (c, ALICE.key, MODEL, len(query), pack(ngram_vector("小狗豆豆今天打了疫苗"))))
        assert c in {h for h, _ in await vectors.nearest(ALICE, MODEL, query, 5)}
        with other:
            other.execute("DELETE FROM memory_vectors WHERE handle = ?", (a,))
        assert a not in {h for h, _ in await vectors.nearest(ALICE, MODEL, query, 5)}
    finally:
        other.close()
    assert len(reads) == 3
    await vectors.delete([b])  # deleted here: no copy of the scope's vectors is kept in memory
    assert [h for h, _ in await vectors.nearest(ALICE, MODEL, query, 5)] == [c]


@settings(max_examples=200, deadline=None)
@given(scores=st.lists(st.sampled_from([0.1, 0.25, 0.5, 0.75, 0.9]), max_size=30), k=st.integers(0, 35))
def test_top_k_equals_a_full_sort_ties_and_all(scores: list[float], k: int) -> None:
    import numpy as np

    handles = list(range(100, 100 + len(scores)))
    rng = np.random.default_rng(len(scores))
    handles = [int(h) for h in rng.permutation(handles)] if handles else []
    # One-dimensional vectors: each row's similarity to the query (1.0) is its score.
    matrix = _Matrix(0, np.asarray(handles, dtype=np.int64), np.asarray(scores, dtype=np.float32).reshape(-1, 1))
    expected = sorted(((h, float(np.float32(s))) for h, s in zip(handles, scores, strict=True)),
                      key=lambda item: (-item[1], item[0]))[:k]
    assert top_k(matrix, [1.0], k) == expected
