"""Short-term memory kept in the database: the last turns come back after a restart, today's small events
reach the reply, forgetting reaches the kept turns, and the stats the user and operators see."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from companion.core.models import MemoryDraft, Scope, Turn
from tests.fakes import FakeLLM
from tests.scripted import user_words
from tests.support import Clock, close_rig, make_settings, open_rig

ME = Scope(7070)


async def test_a_restart_keeps_the_last_ten_minutes(fake_llm: FakeLLM, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    clock = Clock()
    fake_llm.set_chat_reply("嗯嗯")
    first = await open_rig(fake_llm, settings, clock)
    await first.chat.start(ME)
    for text in ("我刚到家", "今天加班到十点", "明天还要早起"):
        await first.chat.reply(ME, text)
    await close_rig(first)  # the process ends

    again = await open_rig(fake_llm, settings, clock)
    try:
        assert again.chat.is_active(ME)
        await again.chat.reply(ME, "我们刚才聊到哪了")
        said = [user_words(str(m["content"])) for m in fake_llm.chat_requests()[-1]["messages"] if m["role"] == "user"]
        assert said[:3] == ["我刚到家", "今天加班到十点", "明天还要早起"]
        stats = await again.engine.short_stats(ME)
        assert stats.turns == 4 and stats.events == 0
        await again.chat.stop(ME)
        assert await again.engine.recent_turns(ME, 10) == []  # /stop_aiGF clears short-term context
    finally:
        await close_rig(again)


async def test_todays_events_reach_the_reply_and_forgetting_reaches_kept_turns(fake_llm: FakeLLM,
                                                                              tmp_path: Path) -> None:
    rig = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        fake_llm.set_chat_reply("好的")
        fake_llm.set_json_reply(json.dumps({"today": ["吃了感冒药", "加班"], "memories": [
            {"event": "2025-12-23 生日是三月五日", "keywords": ["生日", "三月五日"], "importance": 80,
             "type": "fact"}]}, ensure_ascii=False))
        await rig.chat.start(ME)
        await rig.chat.reply(ME, "我生日是三月五日，今天吃了感冒药还加班")
        await rig.engine.consolidate(ME, rig.clock())
        assert await rig.engine.today_events(ME, rig.clock()) == ["吃了感冒药", "加班"]
        await rig.chat.reply(ME, "好累")
        assert "吃了感冒药" in json.dumps(fake_llm.chat_requests()[-1], ensure_ascii=False)
        assert await rig.engine.today_events(ME, rig.clock() + timedelta(days=1)) == []  # a new day

        [birthday] = [m for m in await rig.engine.memories(ME) if "生日" in m.event]
        await rig.chat.forget(ME, [birthday.id])
        kept = [t.user for t in await rig.engine.recent_turns(ME, 10)]
        assert kept == ["好累"]  # the turn that told the birthday left the persisted context too
        stats = await rig.engine.short_stats(ME)
        assert stats.last_extraction_at == rig.clock()
    finally:
        await close_rig(rig)


async def test_recall_hit_rate_counts_turns_that_carried_a_memory(fake_llm: FakeLLM, tmp_path: Path) -> None:
    rig = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        fake_llm.set_chat_reply("嗯")
        await rig.engine.remember(ME, [MemoryDraft("2025-12-20 感冒发烧", ["感冒", "发烧"], 90.0)], rig.clock())
        await rig.chat.start(ME)
        await rig.chat.reply(ME, "今天天气不错")
        await rig.chat.reply(ME, "感冒发烧还没好")
        stats = await rig.engine.short_stats(ME)
        assert stats.turns == 2 and stats.recall_hit_rate == 0.5
    finally:
        await close_rig(rig)


async def test_todays_events_are_read_once_and_follow_every_change(fake_llm: FakeLLM, tmp_path: Path) -> None:
    """Each reply reads today's events from memory; an extraction by another process (an operator's
    console on the same database), a clear, or a forget are seen on the next reply."""
    settings = make_settings(tmp_path)
    clock = Clock()
    bot = await open_rig(fake_llm, settings, clock)
    other = await open_rig(fake_llm, settings, clock)
    try:
        await bot.engine.set_active(ME, True, clock())

        async def today(turn: int) -> list[str]:
            return (await (await bot.engine.open_turn(ME)).context("在吗", clock(), turn=turn, cooldown={})).today

        assert await today(1) == []
        fake_llm.set_json_reply(json.dumps({"today": ["吃了感冒药"], "memories": []}, ensure_ascii=False))
        await other.engine.note_turn(ME, Turn(user="我刚吃了感冒药", reply="好好休息", at=clock()))
        await other.engine.consolidate(ME, clock())
        assert await today(2) == ["吃了感冒药"]
        await bot.engine.clear_short_term(ME)
        assert await today(3) == []
    finally:
        await close_rig(other)
        await close_rig(bot)
