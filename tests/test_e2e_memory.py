"""``python bot.py`` as a process against the fake servers: save -> receipt -> /memories -> forget with a
button -> the forgotten fact is absent from the next LLM request."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from tests.fakes import FakeLLM, FakeTelegram
from tests.test_e2e_process import ROOT, USER, bot_env, say, servers

__all__ = ["servers"]


async def press(tg: FakeTelegram, message: dict[str, object], label: str, answers: int) -> None:
    data = next(d for text, d in tg.buttons(message) if label in text)
    tg.push_callback(USER, int(str(message["message_id"])), data)
    await tg.wait_for_callback_answers(answers, timeout=20)


async def test_save_list_forget_reaches_the_next_llm_request(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    llm.set_chat_reply("嗯嗯，我在听。")
    llm.set_json_reply(lambda body: json.dumps(
        {"event": "我对花生过敏", "keywords": ["花生", "过敏"], "type": "fact", "importance": 90, "core": True}
        if "明确要求你记住" in json.dumps(body, ensure_ascii=False)
        else {"memories": []} if "提取" in json.dumps(body, ensure_ascii=False) else {"core": "", "dynamic": []},
        ensure_ascii=False))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), env=bot_env(tg, llm, tmp_path), cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await tg.wait_for_call("setMyCommands", timeout=30)
        await say(tg, "/start_aiGF", 1)
        receipt_text = await say(tg, "记住：我对花生过敏", 2)
        assert receipt_text == "记住了：我对花生过敏（长期记忆）"
        receipt = tg.sent_messages(USER)[-1]
        assert [t for t, _ in tg.buttons(receipt)] == ["👌 好的", "✏️ 修改", "🗑 忘掉"]

        await say(tg, "今天吃什么好呢", 3)
        assert "花生过敏" in json.dumps(llm.chat_requests()[-1], ensure_ascii=False)  # the fact is known

        listing = await say(tg, "/memories", 4)
        assert "我对花生过敏" in listing and "【长期记忆】" in listing
        await press(tg, tg.sent_messages(USER)[-1], "1 忘掉", 1)
        await tg.wait_for_edit(USER, int(tg.sent_messages(USER)[-1]["message_id"]), "忘掉了")

        await say(tg, "晚饭想吃点坚果", 5)
        last = json.dumps(llm.chat_requests()[-1], ensure_ascii=False)
        assert "花生" not in last, "a forgotten fact reached the model"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "花生" not in output, "memory text reached the log above DEBUG"


async def test_short_term_context_survives_a_restart(servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = servers
    llm.set_chat_reply("嗯嗯，我在听。")
    env = bot_env(tg, llm, tmp_path)

    async def run_until(expect: int, text: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bot.py"), env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await tg.wait_for_call("setMyCommands", timeout=30)
            tg.calls.clear()
            await say(tg, text, expect)
        finally:
            proc.send_signal(signal.SIGTERM)
            output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
        assert proc.returncode == 0, output

    await run_until(1, "/start_aiGF")
    await run_until(2, "今天刚搬完家，累坏了")
    await run_until(3, "你还记得我刚才说了什么吗")
    messages = llm.chat_requests()[-1]["messages"]
    assert "今天刚搬完家" in json.dumps(messages, ensure_ascii=False), "the restart lost the short-term context"
