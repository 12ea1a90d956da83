"""State a second worker process must see lives in the store: two chat services, each with its own engine
and store connection on one database file (as two worker processes would be), see each other's /start
and /stop, and one continues the conversation the other began (a chat's shard moved to another worker)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.chat import texts
from companion.core.hints import HINT_EVERY
from companion.core.models import MemoryDraft, Scope, Validity
from tests.fakes import FakeLLM
from tests.support import Rig, close_rig, make_settings, open_rig

ME = Scope(777)
COLD = "2025-12-22 感冒发烧，身体不舒服"


@pytest.fixture
async def workers(fake_llm: FakeLLM, tmp_path: Path) -> AsyncIterator[tuple[Rig, Rig]]:
    settings = make_settings(tmp_path)
    first = await open_rig(fake_llm, settings)
    second = await open_rig(fake_llm, settings)
    try:
        yield first, second
    finally:
        await close_rig(second)
        await close_rig(first)


async def test_companion_mode_switched_by_one_worker_is_seen_by_the_other(workers: tuple[Rig, Rig]) -> None:
    one, two = workers
    await one.chat.start(ME)
    assert not two.chat.is_active(ME)  # loaded before the start: its cache says off...
    assert await two.chat.active(ME)  # ...and the store says on
    assert (await two.chat.reply(ME, "你好呀")).ok
    await one.chat.stop(ME)
    assert two.chat.is_active(ME)  # cached until its next read of the store
    late = await two.chat.reply(ME, "还在吗")
    assert (late.ok, late.text) == (False, texts.NOT_STARTED)
    assert not two.chat.is_active(ME) and not await two.chat.active(ME)
    assert [t.user for t in await one.engine.pending_turns(ME, 10)] == ["你好呀"]  # the late one is not kept


async def test_a_stop_in_progress_here_is_not_undone_by_an_older_read(workers: tuple[Rig, Rig]) -> None:
    one, _ = workers
    await one.chat.start(ME)
    mark = one.chat.modes.mark()
    async with one.chat.modes.switching(ME):
        one.chat.modes.set(ME, False)
        assert not one.chat.modes.observe(ME, True, mark)  # read before the switch: not trusted
        assert not one.chat.modes.observe(ME, True, one.chat.modes.mark())  # still switching
    assert not one.chat.is_active(ME)


async def test_an_edit_pressed_on_one_worker_takes_the_next_message_on_the_other(workers: tuple[Rig, Rig]) -> None:
    one, two = workers
    await one.chat.start(ME)
    saved = await one.engine.save_draft(ME, MemoryDraft("养了一只猫叫咪咪", ["猫"], 70), one.clock())
    await one.chat.reply(ME, "你好")  # both have a session already: the pending edit is not in it
    await two.chat.reply(ME, "你好")
    await one.chat.begin_edit(ME, saved.id)
    reply = await two.chat.reply(ME, "养了一只猫叫咪咪，三岁了")
    assert reply.saved is not None and reply.saved.id == saved.id
    assert (await two.engine.get(ME, saved.id)).event == "养了一只猫叫咪咪，三岁了"
    after = await one.chat.reply(ME, "今天好冷")  # taken: the next message is talk again, on either worker
    assert after.saved is None and (await one.engine.get(ME, saved.id)).event == "养了一只猫叫咪咪，三岁了"


async def test_a_worker_taking_a_chat_back_continues_from_what_the_other_wrote(workers: tuple[Rig, Rig]) -> None:
    one, two = workers
    await one.chat.start(ME)
    await one.chat.reply(ME, "你好")  # the first worker's session: turn 1
    for text in ("在吗", "我回来了"):  # the chat's shard moved to the second worker: turns 2 and 3
        await two.chat.reply(ME, text)
    await one.chat.taken_over(lambda scope: scope == ME)  # ...and back: the cached session is older than the store
    await one.chat.reply(ME, "还在")
    assert one.chat.session(ME).turn == 4
    assert [t.user for t in one.chat.session(ME).history] == ["你好", "在吗", "我回来了", "还在"]

async def test_a_hint_one_worker_sent_holds_the_other_back(workers: tuple[Rig, Rig]) -> None:
    one, two = workers
    assert await one.chat.hints.allow(ME)
    assert not await two.chat.hints.allow(ME)  # the other process hinted a moment ago
    for rig in (one, two):
        rig.clock.advance(seconds=HINT_EVERY.total_seconds())
    assert await two.chat.hints.allow(ME)
    assert not await one.chat.hints.allow(ME) and not await two.chat.hints.allow(ME)


async def test_a_worker_taking_a_chat_over_continues_its_cooldowns_and_countdown(
        fake_llm: FakeLLM, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, extract_every_min=3, extract_every_max=3)
    one = await open_rig(fake_llm, settings)
    await one.engine.remember(ME, [MemoryDraft(COLD, ["感冒", "发烧", "不舒服"], 85, Validity.DAYS_30)], one.clock())
    # Opened after the scope was: a SQLite store learns the scopes another process registers only at open.
    two = await open_rig(fake_llm, settings)
    try:
        fake_llm.set_json_reply('{"memories": []}')
        await one.chat.start(ME)
        assert (await one.chat.reply(ME, "我今天又有点不舒服")).recalled  # turn 1: shown by the first worker
        await one.chat.reply(ME, "出去走了走")
        await one.chat.drain()
        assert await one.engine.pending_count(ME) == 2
        # The first worker is gone (kill -9); the second takes the chat over at its third turn.
        assert (await two.chat.reply(ME, "我今天又有点不舒服")).recalled == ()  # cooling since turn 1
        await two.chat.drain()
        assert await two.engine.pending_count(ME) == 0  # the countdown went on: the third turn extracted
        for text in ("吃了饭", "看了书"):
            await two.chat.reply(ME, text)
        assert (await two.chat.reply(ME, "我今天又有点不舒服")).recalled  # turn 6: the cooldown is over
        await two.chat.drain()
        assert await two.engine.pending_count(ME) == 0  # and the sixth extracted again
    finally:
        await close_rig(two)
        await close_rig(one)
