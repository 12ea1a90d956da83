"""Derived copies follow the change journal (``companion.engine.following``): a copy registered once with
``MemoryEngine.follow`` hears every forget, whichever door it came through (the engine's forget, a review's
forget, forget everything, another process's forget), with no word from forget's code; the engine's own
copies (the cached profile, the recall index) are cleared that way. The real engine on a real SQLite
file; "another process" is a second engine on the same file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from companion.config.settings import Settings
from companion.core import tiers
from companion.core.changes import ChangeOp
from companion.core.models import MemoryDraft, MemoryType, Profile, Scope, Status, Validity
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine, News
from tests.support import make_settings

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ME = Scope(777)
KEYWORDS = KeywordExtractor()


def dog(turn: str | None = None) -> MemoryDraft:
    return MemoryDraft("我家小狗叫豆豆", ["小狗", "豆豆"], 80, Validity.PERMANENT, MemoryType.FACT,
                       source_turns=(turn,) if turn else ())


def tea() -> MemoryDraft:
    return MemoryDraft("喜欢喝珍珠奶茶", ["奶茶", "珍珠奶茶"], 70, Validity.PERMANENT, MemoryType.PREFERENCE)


@dataclass
class Recorder:
    """A derived copy nobody's forget knows of: it only keeps what it is told."""

    news: list[News]

    async def follow(self, news: News) -> None:
        self.news.append(news)

    def forgets(self) -> list[News]:
        return [n for n in self.news if n.forgot]


class Broken:
    async def follow(self, news: News) -> None:
        raise RuntimeError("this copy's disk went away")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, embeddings="off")


@pytest.fixture
async def engine(settings: Settings) -> AsyncIterator[MemoryEngine]:
    made = await open_engine(settings, KEYWORDS)
    try:
        yield made
    finally:
        await made.close()


@asynccontextmanager
async def another_process(settings: Settings) -> AsyncIterator[MemoryEngine]:
    """Another process on the same database (opened after the scope was written: a store learns of a new
    scope's table when it opens)."""
    made = await open_engine(settings, KEYWORDS)
    try:
        yield made
    finally:
        await made.close()


async def test_a_new_copy_hears_every_forget_with_what_was_forgotten(engine: MemoryEngine) -> None:
    copy = Recorder([])
    engine.follow(copy)
    [a] = await engine.remember(ME, [dog("k1")], NOW)  # the scope's first write: the feed starts here
    [b] = await engine.remember(ME, [tea()], NOW)
    assert copy.news and not copy.forgets(), "a write is news too, but nothing was forgotten"
    assert {c.handle for n in copy.news for c in n.changes if c.op is ChangeOp.ADDED} == {b}

    await engine.forget(ME, [a])
    [one] = copy.forgets()
    assert one.scope == ME and one.forgetting is not None and not one.forgetting.everything
    assert [m.event for m in one.forgetting.memories] == ["我家小狗叫豆豆"]  # as it was: the store keeps no text
    assert one.forgetting.turn_keys == {"k1"} and one.forgotten == {a} and not one.unexplained
    assert [c.handle for c in one.changes if c.op is ChangeOp.FORGOTTEN] == [a]

    await engine.review(ME, b, tiers.Action.FORGET, NOW)  # a review's forget: another door, same news
    assert copy.forgets()[-1].forgotten == {b}

    [c] = await engine.remember(ME, [tea()], NOW)
    await engine.forget(ME)  # everything
    last = copy.forgets()[-1]
    assert last.forgetting is not None and last.forgetting.everything and c in last.forgotten

    engine.unfollow(copy)
    told = len(copy.news)
    await engine.remember(ME, [dog()], NOW)
    await engine.forget(ME)
    assert len(copy.news) == told


async def test_another_process_forget_reaches_the_copies_when_a_turn_reads_the_counter(
    engine: MemoryEngine, settings: Settings,
) -> None:
    copy = Recorder([])
    engine.follow(copy)
    [a] = await engine.remember(ME, [dog("k1")], NOW)
    await engine.open_turn(ME)
    told = len(copy.news)
    await engine.open_turn(ME)
    assert len(copy.news) == told, "a counter that did not move tells nothing"

    async with another_process(settings) as other:
        await other.forget(ME, [a])
    assert not copy.forgets(), "this process hears of it at its next read of the counter"
    await engine.open_turn(ME)
    [news] = copy.forgets()
    # The journal holds the handle, never the words: the copy must drop what it cannot prove clean.
    assert news.forgetting is None and news.forgotten == {a} and news.unexplained


async def test_a_failing_copy_does_not_keep_the_forget_from_the_others(engine: MemoryEngine) -> None:
    copy = Recorder([])
    engine.follow(Broken())
    engine.follow(copy)
    [a] = await engine.remember(ME, [dog()], NOW)
    await engine.profiles.current(ME)
    with pytest.raises(RuntimeError):
        await engine.forget(ME, [a])
    assert [n.forgotten for n in copy.forgets()] == [{a}]
    [stone] = await engine.memories(ME, {Status.FORGOTTEN})
    assert stone.event == ""


async def test_the_cached_profile_follows_forgets_here_and_elsewhere(engine: MemoryEngine, settings: Settings) -> None:
    store = engine._store  # the test writes a built profile as a rebuild would
    [a, b] = await engine.remember(ME, [dog(), tea()], NOW)
    await store.save_profile(ME, Profile(core="用户家的小狗叫豆豆", built_at=NOW), NOW)
    assert (await engine.profile(ME)) is not None  # cached now
    await engine.forget(ME, [a])
    assert await engine.profile(ME) is None, "the forget deleted the stored profile; the cached copy followed"

    await store.save_profile(ME, Profile(core="用户喜欢喝珍珠奶茶", built_at=NOW), NOW)
    await engine.open_turn(ME)
    assert (await engine.profile(ME)) is not None
    async with another_process(settings) as other:
        await other.forget(ME, [b])
    assert (await engine.profile(ME)) is not None, "the copy of another process's forget is stale until a read"
    await engine.open_turn(ME)
    assert await engine.profile(ME) is None


async def test_a_retold_memory_after_a_forget_is_new_not_merged_into_the_tombstone(engine: MemoryEngine) -> None:
    [a] = await engine.remember(ME, [dog()], NOW)
    assert await engine.recall(ME, "小狗豆豆", NOW)  # the recall index is loaded: writes plan from it
    await engine.forget(ME, [a])
    [again] = await engine.remember(ME, [dog()], NOW)
    assert again != a
    assert [m.id for m in await engine.memories(ME)] == [again]
    [stone] = await engine.memories(ME, {Status.FORGOTTEN})
    assert stone.id == a and stone.event == ""
