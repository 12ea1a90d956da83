"""Follow-ups written first, ``python bot.py`` as a real process against the fake Telegram and LLM, its clock
moved with libfaketime: a trip told on a Friday is asked about, unprompted, the morning after it ended, once
(a restart does not send it again), with the way to stop it and a "别再提" button; the answer is read with
what was asked (on PostgreSQL with two workers, by whichever process takes it); /followup off stops it.
Neither the memory nor the message reaches the log. ``python bot.py console`` shows it when it starts."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from handlers.keyboards import FOLLOWUP_STOP_BUTTON
from tests.fakes import FakeLLM, FakeTelegram
from tests.pgtest import pg_schema
from tests.process import ROOT, bot_env, clean_env, start_bot, stop_bot
from tests.redistest import SERVER as REDIS_SERVER
from tests.redistest import redis_keys
from tests.scripted import ScriptedBrain
from tests.servers import free_port
from tests.timed import Person, faked

USER = 6101
ASKED = "杭州出差回来啦？都顺利吗"
SAVES = {"杭州": {"event": "下周三去杭州出差三天", "keywords": ["杭州", "出差"], "type": "event", "importance": 70}}


def chat(body: dict[str, Any]) -> str:
    last = body["messages"][-1]
    return ASKED if last["role"] == "system" and "主动发一条消息" in last["content"] else "嗯嗯，我在听呢。"


@asynccontextmanager
async def deployment(kind: str, tg: FakeTelegram, llm: FakeLLM, root: Path) -> AsyncIterator[dict[str, str]]:
    """The bot's environment: one process on SQLite, polling; or PostgreSQL with two worker processes over
    Redis behind the webhook (the follow-up round runs where the leader runs, the answer may reach another)."""
    env = bot_env(tg, llm, root, FOLLOWUP_CHECK_MINUTES="0.1")
    if kind == "sqlite":
        yield env
        return
    async with pg_schema() as url, redis_keys() as prefix:
        port = free_port()
        yield env | {"DATABASE_URL": url, "REDIS_URL": REDIS_SERVER, "REDIS_PREFIX": prefix, "WORKERS": "2",
                     "WEBHOOK_URL": f"http://127.0.0.1:{port}/hook", "WEBHOOK_PORT": str(port)}


async def test_the_morning_after_the_trip_the_companion_writes_first_once(
        timed_servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    await the_morning_after_the_trip(timed_servers, tmp_path, "sqlite")


async def the_morning_after_the_trip(timed_servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path, kind: str) -> None:
    """Told on a Friday; the Saturday after the trip the companion writes first, once across a restart; the
    answer is read with it; the button and /followup off stop it; nothing in the log."""
    tg, llm = timed_servers
    ScriptedBrain(saves=SAVES, chat=chat).install(llm)
    me = Person(tg, llm, USER)
    started = "setMyCommands" if kind == "sqlite" else "setWebhook"
    async with deployment(kind, tg, llm, tmp_path) as env:
        proc = await start_bot(faked(env, "2026-12-04 02:00:00"), tmp_path)  # Friday 10:00 local
        try:
            await tg.wait_for_call(started, timeout=120)
            await me.say("/start_aiGF")
            assert "12月9日" in await me.say("记住：下周三我要去杭州出差三天")
        finally:
            output = await stop_bot(proc)

        # Saturday 12月12日 10:20 local: the trip ended the day before.
        proc = await start_bot(faked(env, "2026-12-12 02:20:00"), tmp_path)
        try:
            await tg.wait_for_call(started, timeout=120, count=2)
            [written] = (await tg.wait_for_messages(USER, me.sent + 1, timeout=60))[me.sent:]
            me.sent += 1
            assert written["text"].startswith(ASKED) and "/followup off" in written["text"], written["text"]
            assert [text for text, _ in tg.buttons(written)] == [FOLLOWUP_STOP_BUTTON]
            await asyncio.sleep(1)  # sent, then kept as the conversation's turn: a stop between loses only that
        finally:
            output += await stop_bot(proc)

        # A restart the same morning: recorded before it was sent, it is not sent again.
        proc = await start_bot(faked(env, "2026-12-12 02:40:00"), tmp_path)
        try:
            await tg.wait_for_call(started, timeout=120, count=3)
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


async def test_the_console_shows_the_follow_up_when_it_starts_the_morning_after(
        timed_servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    _, llm = timed_servers
    ScriptedBrain(saves=SAVES, chat=chat).install(llm)
    env = clean_env() | {"LLM_API_KEY": "sk-console", "LLM_BASE_URL": llm.base_url, "LLM_MAX_RETRIES": "0",
                         "DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups")}

    async def console(moment: str, *lines: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bot.py"), "console", cwd=tmp_path, env=faked(env, moment),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(("\n".join(lines) + "\n").encode()), 120)
        assert proc.returncode == 0, err.decode()[-2000:]
        return out.decode()

    saved = await console("2026-12-04 02:00:00", "记住：下周三我要去杭州出差三天", "1")  # Friday 10:00
    assert "12月9日" in saved and ASKED not in saved
    shown = await console("2026-12-12 02:30:00", "挺顺利的")  # the Saturday after, 10:30
    greeting, _, rest = shown.partition(ASKED)
    assert rest, shown
    assert "你> " not in greeting, "the follow-up comes before the first prompt, after the greeting"
    assert "/followup off" in rest
    reply_call = llm.chat_requests()[-1]["messages"]
    assert [m["content"] for m in reply_call if m["role"] == "assistant"][-1].startswith(ASKED)
    again = await console("2026-12-12 04:00:00")
    assert ASKED not in again, "once"
