"""Follow-ups written first, ``python bot.py`` as a real process against the fake Telegram and LLM, its clock
moved with libfaketime: a trip told on a Friday is asked about, unprompted, the morning after it ended, once
(a restart does not send it again), with the way to stop it and a "别再提" button; the answer is read with
what was asked; /followup off stops it. Neither the memory nor the message reaches the log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from handlers.keyboards import FOLLOWUP_STOP_BUTTON
from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, start_bot, stop_bot
from tests.scripted import ScriptedBrain
from tests.timed import Person, faked

USER = 6101
ASKED = "杭州出差回来啦？都顺利吗"
SAVES = {"杭州": {"event": "下周三去杭州出差三天", "keywords": ["杭州", "出差"], "type": "event", "importance": 70}}


def chat(body: dict[str, Any]) -> str:
    last = body["messages"][-1]
    return ASKED if last["role"] == "system" and "主动发一条消息" in last["content"] else "嗯嗯，我在听呢。"


async def test_the_morning_after_the_trip_the_companion_writes_first_once(
        timed_servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = timed_servers
    ScriptedBrain(saves=SAVES, chat=chat).install(llm)
    env = bot_env(tg, llm, tmp_path, FOLLOWUP_CHECK_MINUTES="0.1")
    me = Person(tg, llm, USER)
    proc = await start_bot(faked(env, "2026-12-04 02:00:00"), tmp_path)  # Friday 10:00 local
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await me.say("/start_aiGF")
        assert "12月9日" in await me.say("记住：下周三我要去杭州出差三天")
        await asyncio.sleep(7)  # a round passes: nothing has ended yet
        assert len(tg.sent_messages(USER)) == me.sent
    finally:
        output = await stop_bot(proc)

    # Saturday 12月12日 10:20 local: the trip ended the day before.
    proc = await start_bot(faked(env, "2026-12-12 02:20:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90, count=2)
        [written] = (await tg.wait_for_messages(USER, me.sent + 1, timeout=30))[me.sent:]
        me.sent += 1
        assert written["text"].startswith(ASKED) and "/followup off" in written["text"], written["text"]
        assert [text for text, _ in tg.buttons(written)] == [FOLLOWUP_STOP_BUTTON]
    finally:
        output += await stop_bot(proc)

    # A restart the same morning: recorded before it was sent, it is not sent again.
    proc = await start_bot(faked(env, "2026-12-12 02:40:00"), tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90, count=3)
        await asyncio.sleep(8)
        assert len(tg.sent_messages(USER)) == me.sent, "a follow-up is sent at most once"
        told = await me.ask("挺顺利的，项目谈成了")
        assert "挺顺利的" in told
        reply_call = llm.chat_requests()[-1]["messages"]
        assert [m["content"] for m in reply_call if m["role"] == "assistant"][-1].startswith(ASKED)
        tg.push_callback(USER, written["message_id"], tg.buttons(written)[0][1])
        [answer] = await tg.wait_for_callback_answers(1)
        assert "不会再主动提" in str(answer.get("text")), answer
        assert "不再主动发消息" in await me.say("/followup off")
    finally:
        output += await stop_bot(proc)
    for secret in ("杭州", ASKED):
        assert secret not in output, f"{secret!r} reached the log above DEBUG"
