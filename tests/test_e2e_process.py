"""The whole flow with ``python bot.py`` as a real process against the fake Telegram and LLM servers."""

from __future__ import annotations

import asyncio
import csv
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.chat import texts
from handlers.delivery import TYPING_AFTER_SECONDS
from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, clean_env, run_cli, start_bot
from tests.scripted import COLD, ScriptedBrain, is_extraction, model_context
from tests.support import table_of

USER = 5001


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


async def say(tg: FakeTelegram, text: str, expect: int) -> str:
    tg.push_text(USER, text)
    sent = await tg.wait_for_messages(USER, expect, timeout=20)
    return str(sent[expect - 1]["text"])


async def test_bot_process_full_flow(servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = servers
    brain = ScriptedBrain(facts={"感冒": COLD}, chat=caring_reply)
    brain.install(llm)
    env = bot_env(tg, llm, tmp_path)
    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)  # a loaded CI machine starts the process slowly
        assert [c["command"] for c in tg.commands or []] == list(texts.COMMANDS)

        assert await say(tg, "你好", 1) == texts.NOT_STARTED
        assert await say(tg, "/start_aiGF", 2) == texts.GREETING_NEW

        # Health news triggers extraction at once; the fake LLM sees the extraction call.
        await say(tg, "我昨天感冒发烧了，今天好难受", 3)
        extraction = await llm.wait_for_requests(1, is_extraction, timeout=20)
        assert "感冒发烧" in str(extraction[0]["messages"][-1]["content"])
        await wait_for_rows(tmp_path, 1)

        await say(tg, "周末想去公园散散步", 4)
        chat_calls = llm.chat_requests()
        assert "感冒" not in model_context(chat_calls[-1])

        # A later turn about feeling unwell brings the memory into that LLM call.
        await say(tg, "今天又有点不舒服", 5)
        assert "感冒发烧" in model_context(llm.chat_requests()[-1])
        # Cooldown: the very next related turn does not get it again.
        await say(tg, "还是不舒服，头也晕", 6)
        assert "感冒发烧" not in model_context(llm.chat_requests()[-1])

        assert await say(tg, "/stop_aiGF", 7) == texts.STOPPED
        await say(tg, "/start_aiGF", 8)

        async def slow_reply(body: dict[str, object]) -> str:  # slower than TYPING_AFTER_SECONDS: "typing…" shows
            await asyncio.sleep(TYPING_AFTER_SECONDS + 0.5)
            return caring_reply(body)

        llm.set_chat_reply(slow_reply)
        await say(tg, "我们刚才聊了什么", 9)
        history = llm.chat_requests()[-1]["messages"]
        assert [m["role"] for m in history] == ["system", "user"], "short-term context was not cleared"

        tg.push_sticker(USER)
        assert (await tg.wait_for_messages(USER, 10, timeout=20))[-1]["text"] == texts.NON_TEXT
        assert tg.chat_actions(USER), "typing was never shown"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "sk-e2e" not in output and tg.token not in output, "a secret reached the log"
    assert "感冒发烧" not in output, "memory text reached the log above DEBUG"

    code, out, err = await run_cli(env, tmp_path, "backup")
    assert code == 0, err
    day_dirs = list((tmp_path / "backups").iterdir())
    assert len(day_dirs) == 1
    with (day_dirs[0] / f"u{USER}.csv").open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][:7] == ["id", "事件", "关键词", "重要程度", "创建时间", "有效期", "最后提及时间"]
    assert len(rows) == 2 and rows[1][1] == "感冒发烧，身体不舒服"  # its day is a column of its own
    assert rows[1][2] == "感冒,发烧,不舒服" and rows[1][5] == "30d（30天）"
    assert rows[1][6], "the mention in the reply was not recorded"

    code, out, _ = await run_cli(env, tmp_path, "memories", str(USER))
    assert code == 0 and "感冒发烧" in out


def caring_reply(body: dict[str, object]) -> str:
    """Like a real companion: bring the memory up when it is in the prompt."""
    return "感冒还没好吗？记得多喝热水。" if "感冒发烧" in model_context(body) else "嗯嗯，我在听呢。"


async def wait_for_rows(tmp: Path, count: int) -> None:
    import sqlite3

    db = tmp / "data" / "memory.sqlite3"
    for _ in range(200):
        conn = sqlite3.connect(db)
        try:
            table = table_of(conn, f"u{USER}")
            rows = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] if table else 0
        finally:
            conn.close()
        if rows >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"expected {count} stored memories")


async def test_missing_token_stops_with_one_clear_line(tmp_path: Path) -> None:
    code, _out, err = await run_cli(clean_env(), tmp_path)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "TELEGRAM_BOT_TOKEN" in lines[0] and "LLM_API_KEY" in lines[0]
