"""The storage seam's one way in: ``open_store(url)`` and its backend registry, the ``DATABASE_URL``
setting that names the store, and an engine built on any registered backend without the bot's settings."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from companion.config.settings import load_settings
from companion.core.errors import ConfigError, StorageError
from companion.core.models import MemoryDraft, Scope
from companion.recall.keywords import KeywordExtractor
from companion.storage import factory
from companion.storage.base import MemoryStore
from companion.storage.factory import UnknownStoreError, open_store, register_backend, sqlite_path, sqlite_url
from companion.storage.inmemory import InMemoryStore
from companion.storage.sqlite import SQLiteStore
from memory import EngineConfig, MemoryEngine

NOW = datetime(2025, 6, 1, 12, tzinfo=UTC)
ME = Scope(7)


async def test_a_sqlite_url_opens_the_file_it_names(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.sqlite3"
    store = await open_store(sqlite_url(path))
    try:
        assert isinstance(store, SQLiteStore)
        assert path.is_file()
        assert store.maintenance() is store and store.usage_log() is not None
        vectors = await store.open_vectors()
        assert vectors is not None
        await vectors.close()
    finally:
        await store.close()


async def test_memory_url_opens_an_empty_store_with_no_optional_capabilities() -> None:
    store = await open_store("memory://")
    assert isinstance(store, InMemoryStore)
    assert await store.open_vectors() is None
    assert store.usage_log() is None and store.maintenance() is None
    assert await store.change_counter(Scope(1)) == 0


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("mysql://bot:s3cret@db/companion", "unknown database scheme 'mysql'"),
        ("data/memory.sqlite3", "not a URL"),
        ("sqlite://relative.db", "sqlite:///<path>"),
        ("memory://somewhere", "just memory://"),
    ],
)
async def test_a_bad_url_is_one_typed_line_without_its_password(url: str, words: str) -> None:
    with pytest.raises(UnknownStoreError) as caught:
        await open_store(url)
    message = str(caught.value)
    assert isinstance(caught.value, ConfigError)
    assert words in message and "\n" not in message and "s3cret" not in message


async def test_an_unreachable_postgresql_server_is_one_typed_line_without_its_password() -> None:
    for scheme in ("postgresql", "postgres"):
        with pytest.raises(StorageError) as caught:
            await open_store(f"{scheme}://bot:s3cret@127.0.0.1:1/companion")
        assert "cannot connect to PostgreSQL" in str(caught.value) and "s3cret" not in str(caught.value)


def test_sqlite_urls_spell_relative_and_absolute_paths_as_sqlalchemy_does() -> None:
    assert sqlite_path("sqlite:///data/m.sqlite3") == Path("data/m.sqlite3")
    assert sqlite_path("sqlite:////srv/m.sqlite3") == Path("/srv/m.sqlite3")
    assert sqlite_path(sqlite_url(Path("/srv/m.sqlite3"))) == Path("/srv/m.sqlite3")
    assert sqlite_path("memory://") is None


async def test_a_registered_backend_is_opened_by_its_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(factory, "_BACKENDS", dict(factory._BACKENDS))
    seen: list[str] = []

    async def opener(rest: str) -> MemoryStore:
        seen.append(rest)
        return InMemoryStore()

    register_backend("Custom", opener)
    assert "custom" in factory.backends()
    store = await open_store("custom://host/db?x=1")
    assert isinstance(store, InMemoryStore) and seen == ["host/db?x=1"]


def test_the_default_database_is_sqlite_in_the_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = load_settings(tmp_path, _env_file=None)
    assert settings.database == sqlite_url(tmp_path / "data" / "memory.sqlite3")
    assert settings.db_path == tmp_path / "data" / "memory.sqlite3"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("sqlite:///var/m.sqlite3", "project/var/m.sqlite3"), ("sqlite:////abs/m.sqlite3", "/abs/m.sqlite3")],
)
def test_database_url_names_the_file_relative_to_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raw: str, expected: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("DATABASE_URL", raw)
    settings = load_settings(project, _env_file=None)
    path = Path(expected) if expected.startswith("/") else tmp_path / expected
    assert settings.db_path == path
    assert settings.database == sqlite_url(path)


def test_another_backend_keeps_the_lock_file_in_the_data_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "memory://")
    settings = load_settings(_env_file=None)
    assert settings.database == "memory://"
    assert settings.db_path == settings.data_dir / "memory.sqlite3"


async def test_an_engine_needs_no_bot_settings() -> None:
    """A host builds the engine from a config, a store URL, keywords and a clock: remember, recall, forget."""
    engine = await MemoryEngine.open("memory://", EngineConfig(capacity=10, important_keywords=("布丁",)),
                                     KeywordExtractor(), clock=lambda: NOW)
    try:
        await engine.ready()
        [handle] = await engine.remember(ME, [MemoryDraft(event="猫叫布丁", keywords=["猫", "布丁"],
                                                          importance=70)], NOW)
        assert [r.memory.id for r in await engine.recall(ME, "布丁今天怎么样", NOW)] == [handle]
        assert await engine.forget(ME, [handle]) == 1
        assert await engine.recall(ME, "布丁今天怎么样", NOW) == []
    finally:
        await engine.close()
