"""Turns that touch a learned fact with one word, ``python bot.py`` as a real process against the fake Telegram
and LLM: two people tell a few things in passing, then, that day and five days later (the stored times moved
back, the decay run, the process restarted), mention them the way people do ("雅思的口语部分好难" about the
exam, "昨晚又失眠了"). Each such turn must carry its memory to the model; everyday words shared by chance must
not, and one person's memories never reach the other's reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, run_cli, start_bot, stop_bot
from tests.scripted import ScriptedBrain
from tests.test_e2e_month import Chat, age_database

A, B = 7001, 7002
FACTS = {
    "策划": {"event": "在一家游戏公司做策划", "keywords": ["游戏公司", "策划", "工作"], "importance": 75,
             "validity": "permanent", "type": "fact"},
    "年糕": {"event": "养了一只橘猫叫年糕", "keywords": ["年糕", "橘猫", "猫"], "importance": 80,
             "validity": "permanent", "type": "fact"},
    "雅思": {"event": "下个月要考雅思", "keywords": ["雅思", "考试", "英语"], "importance": 75,
             "validity": "30d", "type": "event"},
    "失眠": {"event": "最近失眠挺严重的", "keywords": ["失眠", "睡不着", "睡眠"], "importance": 70,
             "validity": "30d", "type": "event"},
    "爬山": {"event": "和朋友去爬山", "keywords": ["爬山", "周六", "朋友"], "importance": 55,
             "validity": "7d", "type": "event"},
    "海鲜": {"event": "对海鲜过敏", "keywords": ["海鲜", "过敏", "虾", "螃蟹"], "importance": 90,
             "validity": "permanent", "type": "fact"},
}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


async def test_one_distinctive_word_brings_its_memory_back(servers: tuple[FakeTelegram, FakeLLM],
                                                           tmp_path: Path) -> None:
    tg, llm = servers
    ScriptedBrain(facts=FACTS).install(llm)
    env = bot_env(tg, llm, tmp_path, EXTRACT_EVERY_MIN="6", EXTRACT_EVERY_MAX="6")
    a, b = Chat(tg, llm, A), Chat(tg, llm, B)

    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await a.say("/start_aiGF")
        await b.say("/start_aiGF")
        await a.chatter(1)
        await a.say("我在一家游戏公司做策划，天天改需求")
        await a.say("家里有只橘猫，叫年糕，特别能吃")
        await b.say("我对海鲜过敏，吃虾会起疹子")
        await a.say("下个月15号要考雅思，压力好大")
        await a.say("最近失眠挺严重的，两点还睡不着")
        await a.say("周六约了朋友去爬山")
        await a.chatter(4)
        await b.chatter(5)
        await a.touches({"雅思的口语部分好难": "考雅思", "爬山要带什么装备": "和朋友去爬山"})
        await a.chatter(4)
        told = await a.ask("朋友说螃蟹很好吃")  # 朋友 is everyone's word; 螃蟹 is B's memory
        assert "和朋友去爬山" not in told and "海鲜" not in told
        await b.chatter(1)
        told = await b.ask("食堂今天有虾，我能吃吗")
        assert "对海鲜过敏" in told and "年糕" not in told and "雅思" not in told
    finally:
        output = await stop_bot(proc)
    assert "雅思" not in output and "海鲜" not in output, "memory text reached the log above DEBUG"

    # Five days later: the exam and the sleeplessness are still weeks from expiring.
    age_database(tmp_path / "data" / "memory.sqlite3", 5)
    code, _out, err = await run_cli(env, tmp_path, "decay")
    assert code == 0, err
    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90, count=2)
        a.sent = len(tg.sent_messages(A))  # the greeting and answers of the first run
        await a.say("/start_aiGF")
        await a.chatter(1)
        await a.touches({"雅思还剩不到十天了": "考雅思", "昨晚又失眠了": "最近失眠挺严重的",
                         "年糕最近胃口不太好": "年糕"})
    finally:
        await stop_bot(proc)
