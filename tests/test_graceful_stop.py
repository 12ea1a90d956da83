"""SIGTERM while a reply and an extraction wait on a slow model: the bot exits within a bound derived from
STOP_TIMEOUT_SECONDS (not a speed figure: the bound is generous, the point is that a 30-second model call
no longer holds the stop), and every turn the user sent is still queued in SQLite for the next start.

Without the bound the process waits for the model's full timeout per call in flight."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from companion.core.models import Scope
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import Answer, is_json_mode, request_text
from tests.process import bot_env
from tests.scripted import EXTRACT_MARK
from tests.stress.harness import BotProcess, db_path, integrity, started

USER = 8801
STOP_TIMEOUT = 2.0
# Exit within the stop timeout plus generous room for a busy machine (interpreter and SQLite teardown);
# the model below takes 30 s, so a stop that waits for it cannot pass.
BOUND = 2 * STOP_TIMEOUT + 6.0
SLOW = 30.0


def queued(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT user_text FROM pending_turns WHERE scope_key = ?", (Scope(USER).key,))
        return [r[0] for r in rows]


async def test_sigterm_with_a_slow_model_exits_in_time_and_keeps_queued_turns(tmp_path: Path) -> None:
    slow_replies = asyncio.Event()

    async def chat_reply(body: dict[str, Any]) -> Answer:
        if slow_replies.is_set():
            await asyncio.sleep(SLOW)
        return "嗯嗯，我在听。"

    async def json_reply(body: dict[str, Any]) -> str:
        if EXTRACT_MARK in request_text(body):
            await asyncio.sleep(SLOW)
        return '{"memories": []}'

    async with FakeTelegram() as tg, FakeLLM() as llm:
        llm.set_chat_reply(chat_reply)
        llm.set_json_reply(json_reply)
        env = bot_env(tg, llm, tmp_path, QUIET_SECONDS="0", LLM_TIMEOUT_SECONDS="60",
                      EXTRACT_EVERY_MIN="2", EXTRACT_EVERY_MAX="2", STOP_TIMEOUT_SECONDS=str(STOP_TIMEOUT))
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        tg.push_text(USER, "/start_aiGF")
        await tg.wait_for_messages(USER, 1, 30)
        for n, text in enumerate(("第一句：今天去公园散步了", "第二句：晚上吃了火锅"), start=2):
            tg.push_text(USER, text)
            await tg.wait_for_messages(USER, n, 30)
        # The second turn started an extraction; it now waits on the model.
        await llm.wait_for_requests(1, lambda b: is_json_mode(b) and EXTRACT_MARK in request_text(b), timeout=30)
        slow_replies.set()
        tg.push_text(USER, "第三句：明天要考试")
        await llm.wait_for_requests(1, lambda b: not is_json_mode(b) and "第三句" in request_text(b), timeout=30)
        await asyncio.sleep(0.3)
        code, seconds = await bot.stop(within=60)
        log = bot.output
    assert code == 0, log[-3000:]
    assert seconds < BOUND, f"exit took {seconds:.1f} s after SIGTERM (bound {BOUND} s)\n{log[-3000:]}"
    db = db_path(tmp_path)
    assert integrity(db) == "ok"
    kept = queued(db)
    for said in ("第一句", "第二句", "第三句"):
        assert sum(said in text for text in kept) == 1, (said, kept)
    assert "abandoned" in log
    assert "Traceback" not in log, log[-3000:]
