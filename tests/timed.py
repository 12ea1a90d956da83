"""Process tests with the clock moved: ``python bot.py`` under libfaketime, and a person chatting with it
through the fake Telegram server (the servers themselves: the ``timed_servers`` fixture in conftest)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.fakes import FakeLLM, FakeTelegram
from tests.servers import require

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def require_faketime() -> None:
    require(None if LIBFAKETIME.exists() and shutil.which("faketime") else "libfaketime is not installed",
            "faketime", "apt-get install faketime (.ci/run installs it)")


def faked(env: dict[str, str], moment: str) -> dict[str, str]:
    """``env`` with the process's clock starting at ``moment`` (local time is UTC+8: TIMEZONE's default)."""
    return {**env, "LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"@{moment}", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1"}


class Person:
    """One user in a private chat: ``say`` waits for the bot's answer, ``ask`` for the model call it made."""

    def __init__(self, tg: FakeTelegram, llm: FakeLLM, user: int) -> None:
        self.tg, self.llm, self.user, self.sent = tg, llm, user, 0

    async def say(self, text: str) -> str:
        self.sent += 1
        self.tg.push_text(self.user, text)
        return str((await self.tg.wait_for_messages(self.user, self.sent, timeout=30))[self.sent - 1]["text"])

    async def ask(self, text: str) -> str:
        before = len(self.llm.chat_requests())
        await self.say(text)
        requests = await self.llm.wait_for_requests(before + 1, lambda r: not FakeLLM.is_json_mode(r))
        return str(requests[-1]["messages"][-1]["content"])
