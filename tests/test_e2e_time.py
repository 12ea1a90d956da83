"""Memory that lives in time, ``python bot.py`` as a real process against the fake Telegram and LLM, its clock
moved with libfaketime: a trip saved with "下周三" on a Friday is stored as its date, shown as that date in
the receipt and in /memories, told to the model when the user asks about that week on the Monday, still
there the day before it starts however long ago it was told, and gone a week after it ended; a day that
does not exist is not guessed."""

from __future__ import annotations

import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, run_cli, start_bot, stop_bot
from tests.scripted import ScriptedBrain
from tests.servers import require

USER = 6101
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SAVES = {
    "杭州": {"event": "下周三去杭州出差三天", "keywords": ["杭州", "出差"], "type": "event", "importance": 70},
    "生日": {"event": "生日是2月30号", "keywords": ["生日"], "type": "fact", "importance": 80},
}


def faked(env: dict[str, str], moment: str) -> dict[str, str]:
    """``env`` with the process's clock starting at ``moment`` (local time is UTC+8: TIMEZONE's default)."""
    return {**env, "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"@{moment}", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1"}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    require(None if LIBFAKETIME.exists() and shutil.which("faketime") else "libfaketime is not installed",
            "faketime", "apt-get install faketime (.ci/run installs it)")
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


class Person:
    def __init__(self, tg: FakeTelegram, llm: FakeLLM) -> None:
        self.tg, self.llm, self.sent = tg, llm, 0

    async def say(self, text: str) -> str:
        self.sent += 1
        self.tg.push_text(USER, text)
        return str((await self.tg.wait_for_messages(USER, self.sent, timeout=30))[self.sent - 1]["text"])

    async def ask(self, text: str) -> str:
        before = len(self.llm.chat_requests())
        await self.say(text)
        requests = await self.llm.wait_for_requests(before + 1, lambda r: not FakeLLM.is_json_mode(r))
        return str(requests[-1]["messages"][-1]["content"])


async def test_a_trip_told_with_next_wednesday_lives_by_its_date(servers: tuple[FakeTelegram, FakeLLM],
                                                                 tmp_path: Path) -> None:
    tg, llm = servers
    ScriptedBrain(saves=SAVES).install(llm)
    env = bot_env(tg, llm, tmp_path)
    me = Person(tg, llm)

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
