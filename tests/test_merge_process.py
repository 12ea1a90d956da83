"""Two alike saves stay two memories with ``python bot.py`` as a real process (fake Telegram and LLM): each
receipt's buttons carry its own handle, a retelling's receipt says what it replaced, its undo button puts
the old words back, and /why shows the earlier words until then."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import request_text
from tests.process import bot_env, start_bot

USER = 5002
# What the model makes of each saved sentence: its words, and keywords that share all but the day.
KEYWORDS = {
    "每周二晚上要练吉他": ["周二", "晚上", "练吉他", "吉他"],
    "每周四晚上要练吉他": ["周四", "晚上", "练吉他", "吉他"],
    "我对花生过敏": ["花生", "过敏"],
    "我花生过敏，吃了会起疹子": ["花生", "过敏", "疹子"],
}


def judge(body: dict[str, Any]) -> str:
    said = request_text(body).split("用户的原话：", 1)[-1].strip().splitlines()[0]
    return json.dumps({"event": said, "keywords": KEYWORDS.get(said, []), "type": "fact", "importance": 70,
                       "core": False}, ensure_ascii=False)


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


async def test_alike_saves_receipts_and_undo_through_the_bot_process(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    llm.set_json_reply(judge)
    proc = await start_bot(bot_env(tg, llm, tmp_path), tmp_path)
    sent = 0

    async def say(text: str) -> dict[str, Any]:
        nonlocal sent
        sent += 1
        tg.push_text(USER, text)
        return (await tg.wait_for_messages(USER, sent, timeout=20))[sent - 1]

    def handles(message: dict[str, Any]) -> set[str]:
        return {data.split(":")[2] if data.startswith("m:") else data.split(":")[1]
                for _, data in tg.buttons(message)}

    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await say("/start_aiGF")
        tuesday = await say("记住：每周二晚上要练吉他")
        thursday = await say("记住：每周四晚上要练吉他")
        assert tuesday["text"] == "记住了：每周二晚上要练吉他（中期记忆）"
        assert thursday["text"] == "记住了：每周四晚上要练吉他（中期记忆）"
        assert len(handles(tuesday)) == len(handles(thursday)) == 1 and handles(tuesday) != handles(thursday)

        await say("记住：我对花生过敏")
        retold = await say("记住：我花生过敏，吃了会起疹子")
        assert retold["text"] == "改成了：我花生过敏，吃了会起疹子，原来是：我对花生过敏（中期记忆）"
        assert "原来是：“我对花生过敏”" in str((await say("/why 花生"))["text"])

        data = next(d for label, d in tg.buttons(retold) if "撤销" in label)
        tg.push_callback(USER, int(retold["message_id"]), data, chat_id=USER)
        await tg.wait_for_callback_answers(1)
        await tg.wait_for_edit(USER, int(retold["message_id"]), "已撤销，还是原来的：我对花生过敏")
        why = str((await say("/why 花生"))["text"])
        assert why.startswith("“我对花生过敏”") and "原来是" not in why
        assert "每周二晚上要练吉他" in str((await say("/memories"))["text"])
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "花生" not in output and "吉他" not in output, "memory text reached the log above DEBUG"
