"""Memory that lives in time, ``python bot.py`` as a real process against the fake Telegram and LLM, its clock
moved with libfaketime: a trip saved with "下周三" on a Friday is stored as its date, shown as that date in
the receipt and in /memories, told to the model when the user asks about that week on the Monday, still
there the day before it starts however long ago it was told, and gone a week after it ended; a day that
does not exist is not guessed."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, run_cli, start_bot, stop_bot
from tests.scripted import ScriptedBrain
from tests.timed import Person, faked

USER = 6101
SAVES = {
    "杭州": {"event": "下周三去杭州出差三天", "keywords": ["杭州", "出差"], "type": "event", "importance": 70},
    "生日": {"event": "生日是2月30号", "keywords": ["生日"], "type": "fact", "importance": 80},
}
async def test_a_trip_told_with_next_wednesday_lives_by_its_date(timed_servers: tuple[FakeTelegram, FakeLLM],
                                                                 tmp_path: Path) -> None:
    tg, llm = timed_servers
    ScriptedBrain(saves=SAVES).install(llm)
    env = bot_env(tg, llm, tmp_path)
    me = Person(tg, llm, USER)

    # Friday 2026-12-04, 10:00 local.
    proc = await start_bot(faked(env, "2026-12-04 02:00:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await me.say("/start_aiGF")
        receipt = await me.say("记住：下周三我要去杭州出差三天")
        assert "记住了：12月9日（周三）去杭州出差三天" in receipt, receipt
        listed = await me.say("/memories")
        assert "12月9日（周三）去杭州出差三天" in listed and "下周三" not in listed, listed
        unclear = await me.say("记住：我的生日是2月30号")
        assert "日期没看懂" in unclear, unclear
    finally:
        output = await stop_bot(proc)
    assert "杭州" not in output, "memory text reached the log above DEBUG"

    # Monday 2026-12-07: "这周" is now the week of the trip; the model is told it with its date.
    proc = await start_bot(faked(env, "2026-12-07 01:00:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90, count=2)
        told = await me.ask("我这周有什么安排来着")
        assert re.search(r"12月7日-13日.*\n.*12月9日（周三）去杭州出差三天", told), told
        small_talk = await me.ask("今天天气还不错")
        assert "杭州" not in small_talk, "a time word alone must not bring dated memories along"
    finally:
        await stop_bot(proc)

    # Five weeks of decay could not fade it while it was ahead; a week after it ended it is gone.
    code, out, err = await run_cli(faked(env, "2026-12-08 20:00:00"), tmp_path, "decay")
    assert code == 0, err
    code, out, err = await run_cli(faked(env, "2026-12-08 20:00:00"), tmp_path, "memories", str(USER))
    assert code == 0 and "去杭州出差三天" in out, out
    code, out, err = await run_cli(faked(env, "2026-12-19 20:00:00"), tmp_path, "decay")
    assert code == 0, err
    code, out, err = await run_cli(faked(env, "2026-12-19 20:00:00"), tmp_path, "memories", str(USER))
    assert code == 0 and "去杭州出差三天" not in out, out


EVENING = {
    "花生": {"event": "对花生过敏，吃了会起疹子", "keywords": ["花生", "过敏"], "importance": 90,
             "validity": "permanent", "type": "fact"},
    "团子": {"event": "养了一只猫叫团子", "keywords": ["团子", "猫"], "importance": 70, "validity": "permanent",
             "type": "fact"},
    "游戏公司": {"event": "在一家游戏公司做产品经理", "keywords": ["游戏公司", "产品经理", "工作"], "importance": 75,
                 "validity": "permanent", "type": "fact"},
    "马拉松": {"event": "在练半程马拉松", "keywords": ["马拉松", "跑步"], "importance": 60, "validity": "permanent",
               "type": "preference"},
    "虾": {"event": "对虾也过敏", "keywords": ["虾", "过敏", "海鲜"], "importance": 90, "validity": "permanent",
           "type": "fact"},
}


async def test_news_on_a_known_topic_and_every_fact_of_the_evening(timed_servers: tuple[FakeTelegram, FakeLLM],
                                                                   tmp_path: Path) -> None:
    """A second allergy is learned in the turn that tells it, not 8-12 turns later; five facts told in one
    evening are all in view twenty minutes later, the job included, though the profile was built after the
    first one."""
    tg, llm = timed_servers
    brain = ScriptedBrain(facts=EVENING)
    brain.install(llm)
    env = bot_env(tg, llm, tmp_path, EXTRACT_EVERY_MIN="6", EXTRACT_EVERY_MAX="6")
    me = Person(tg, llm, USER)
    proc = await start_bot(faked(env, "2026-12-04 12:00:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await me.say("/start_aiGF")
        await me.say("我对花生过敏，吃了会起疹子")
        for line in ["家里养了一只猫叫团子", "我在一家游戏公司做产品经理", "最近在练半程马拉松", "今天天气还不错",
                     "晚上想早点睡", "刚刚看了会儿电视", "中午随便吃了点面条", "下午开了个很长的会", "有点困了"]:
            await me.say(line)
        await asyncio.sleep(1)  # the regular extraction of those turns has finished
        calls = brain.extraction_calls
        await me.say("对了我对虾也过敏")
        for _ in range(20):  # the extraction runs after the reply, in the background: its write lands soon
            listed = await me.say("/memories")
            if "对虾也过敏" in listed:
                break
            await asyncio.sleep(0.5)
        assert "对虾也过敏" in listed, listed
        assert brain.extraction_calls == calls + 1, "a second allergy is extracted in the turn that tells it"
        told = await me.ask("今天老板又让我改方案，烦死了")
        for fact in ("在一家游戏公司做产品经理", "养了一只猫叫团子", "对虾也过敏"):
            assert fact in told, f"{fact!r} learned this evening is missing from the reply's view:\n{told}"
        retold_calls = brain.extraction_calls
        await me.say("我对花生过敏你知道的")
        await me.say("嗯")
        assert brain.extraction_calls == retold_calls, "retelling a known fact is no news"
    finally:
        await stop_bot(proc)


async def test_after_the_trip_the_next_conversation_asks_how_it_went(timed_servers: tuple[FakeTelegram, FakeLLM],
                                                                     tmp_path: Path) -> None:
    """Saved on a Friday for 12月9日-11日; the Saturday after, a new process's first reply carries the cue,
    marked as a cue; the next reply does not."""
    tg, llm = timed_servers
    ScriptedBrain(saves=SAVES).install(llm)
    env = bot_env(tg, llm, tmp_path)
    me = Person(tg, llm, USER)
    proc = await start_bot(faked(env, "2026-12-04 02:00:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await me.say("/start_aiGF")
        assert "12月9日" in await me.say("记住：下周三我要去杭州出差三天")
        assert "应该已经结束了" not in await me.ask("今天好累啊"), "nothing has ended yet"
    finally:
        await stop_bot(proc)
    proc = await start_bot(faked(env, "2026-12-12 01:00:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90, count=2)
        first = await me.ask("早上好")
        cue = r"可以顺便关心的事（这是提示.*\n- \"12月9日（周三）去杭州出差三天——应该已经结束了"
        assert re.search(cue, first), first
        assert "应该已经结束了" not in await me.ask("今天想睡个懒觉")
    finally:
        await stop_bot(proc)
