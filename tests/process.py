"""Running ``python bot.py`` as a real process in tests: a clean environment and the command line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.fakes import FakeLLM, FakeTelegram

ROOT = Path(__file__).resolve().parent.parent


def clean_env() -> dict[str, str]:
    """The test's environment without the bot's keys. They are set empty rather than left out, because the
    environment wins over the project's ``.env``, which a developer's checkout may have filled in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "LLM_"))}
    env.update(TELEGRAM_BOT_TOKEN="", LLM_API_KEY="", PYTHONUNBUFFERED="1")
    return env


def bot_env(tg: FakeTelegram, llm: FakeLLM, tmp: Path, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(
        TELEGRAM_BOT_TOKEN=tg.token, TELEGRAM_API_BASE=tg.base_url, LLM_API_KEY="sk-e2e",
        LLM_BASE_URL=llm.base_url, LLM_MAX_RETRIES="0", LLM_TIMEOUT_SECONDS="5",
        DATA_DIR=str(tmp / "data"), BACKUP_DIR=str(tmp / "backups"), QUIET_SECONDS="0.3",
        EXTRACT_EVERY_MIN="50", EXTRACT_EVERY_MAX="50", LOG_LEVEL="INFO",
    )
    env.update(extra)
    return env


async def run_cli(
    env: dict[str, str], cwd: Path, *args: str, timeout: float = 120, python_flags: tuple[str, ...] = ()
) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *python_flags, str(ROOT / "bot.py"), *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode or 0, out.decode(), err.decode()


async def start_bot(env: dict[str, str], cwd: Path) -> asyncio.subprocess.Process:
    """The bot as a process, stdout and stderr merged into stdout."""
    return await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
