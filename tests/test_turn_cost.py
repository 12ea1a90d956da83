"""A companion turn costs at most two store calls: one read of what the reply needs (``turn_context``)
and one write of what happened (``record_turn``). On a server database each call is a network round
trip. Counted on the real pipeline and the real SQLite store, wrapped to count every call."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from companion.chat.group import GroupTurn
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import MemoryDraft, Scope, Validity
from companion.core.setting import GROUP_MEMORY, SHARE_PRIVATE
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from companion.storage.sqlite import SQLiteStore
from tests.fakes import FakeLLM
from tests.support import Clock, CountingStore, Rig, make_settings

ME = Scope(777)
IN_GROUP = Scope(777, -100123)
COLD = "2025-12-22 感冒发烧，身体不舒服"


@pytest.fixture
async def counted(fake_llm: FakeLLM, tmp_path: Path) -> AsyncIterator[tuple[Rig, CountingStore]]:
    from companion.llm.client import LLMClient

    settings = make_settings(tmp_path)
    clock = Clock()
    client = LLMClient(api_key="sk-test", base_url=fake_llm.base_url, model="deepseek-chat", max_retries=0, timeout=5)
    raw = await SQLiteStore.open(settings.db_path)
    store = CountingStore(raw)
    engine = await engine_on(cast(MemoryStore, store), settings, KeywordExtractor(), client)
    chat = ChatService(engine, client, ChatConfig.from_settings(settings), clock=clock, rng=random.Random(1))
    await chat.load()
    try:
        yield Rig(fake_llm, client, engine, chat, clock, settings, raw), store
    finally:
        await chat.drain()
        await engine.close()
        await raw.close()
        await client.close()


async def turn(rig: Rig, store: CountingStore, text: str, scope: Scope = ME,
               group: GroupTurn | None = None) -> Counter[str]:
    await rig.chat.drain()  # the previous turn's background extraction and profile rebuild are not this turn's
    store.calls.clear()
    reply = await rig.chat.reply(scope, text, group=group)
    assert reply.ok
    return +store.calls


ONE = Counter({"turn_context": 1, "record_turn": 1})


async def test_a_companion_turn_costs_one_read_and_one_write(counted: tuple[Rig, CountingStore]) -> None:
    rig, store = counted
    rig.llm.set_json_reply('{"core": "用户最近感冒了。", "dynamic": []}')
    await rig.engine.remember(ME, [MemoryDraft(COLD, ["感冒", "发烧", "不舒服"], 85, Validity.DAYS_30)], rig.clock())
    await rig.chat.start(ME)
    # The conversation's first turn also restores the context, loads the recall index and looks for reviews.
    assert await turn(rig, store, "今天天气真好") == ONE
    assert await turn(rig, store, "出去走了走") == ONE
    rig.llm.queue_chat("感冒发烧好点了吗？多喝热水。")
    assert await turn(rig, store, "我今天又有点不舒服") == ONE  # recalled, shown, mentioned: still one write
    [cold] = await rig.engine.memories(ME)
    assert cold.access_count == 1 and cold.mention_count == 1
    told = ["今天天气真好", "出去走了走", "我今天又有点不舒服"]
    assert [t.user for t in await rig.engine.recent_turns(ME, 10)] == told
    assert await rig.engine.pending_count(ME) == 3


async def test_a_restart_restores_the_context_in_the_same_read(counted: tuple[Rig, CountingStore]) -> None:
    rig, store = counted
    await rig.chat.start(ME)
    await turn(rig, store, "我叫小明")
    fresh = ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock)
    await fresh.load()
    store.calls.clear()
    await fresh.reply(ME, "还记得我吗")
    assert store.calls["turn_context"] == 1 and store.calls["short_items"] == 0
    assert "我叫小明" in str(rig.llm.chat_requests()[-1]["messages"])
    await fresh.drain()


async def test_a_group_turn_reads_the_group_switches_with_its_context(counted: tuple[Rig, CountingStore]) -> None:
    rig, store = counted
    await rig.engine.remember(IN_GROUP, [MemoryDraft(COLD, ["感冒", "发烧", "不舒服"], 85, Validity.DAYS_30)],
                              rig.clock())
    await rig.chat.start(IN_GROUP)
    said = GroupTurn(speaker="小明", room="- 小红：今天好冷\n", limit=10)
    rig.llm.queue_chat("你感冒发烧好点了吗？")
    assert await turn(rig, store, "我还是不舒服", IN_GROUP, said) == ONE  # the first: its index loaded too
    rig.llm.queue_chat("感冒发烧要多休息。")
    assert await turn(rig, store, "有点头疼", IN_GROUP, said) == ONE
    [cold] = await rig.engine.memories(IN_GROUP)
    assert cold.mention_count == 2  # shown and mentioned, both times, in the turn's one write
    assert [t.user for t in await rig.engine.pending_turns(IN_GROUP, 10)] == ["我还是不舒服", "有点头疼"]
    await rig.store.set_setting(SHARE_PRIVATE, IN_GROUP.user_id, True)
    await rig.engine.recall(ME, "感冒", rig.clock())  # the private index loaded, as a private turn leaves it
    rig.llm.queue_chat("感冒发烧要多休息。")
    assert await turn(rig, store, "还有点咳嗽", IN_GROUP, said) == ONE + Counter({"change_counter": 1})
    await rig.store.set_setting(SHARE_PRIVATE, IN_GROUP.user_id, False)
    await rig.store.set_setting(GROUP_MEMORY, IN_GROUP.chat_id or 0, False)
    assert await turn(rig, store, "今天好冷", IN_GROUP, said) == Counter({"turn_context": 1})  # nothing kept
