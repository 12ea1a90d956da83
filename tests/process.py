"""Running ``python bot.py`` as a real process in tests: a clean environment and the command line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from tests.fakes import FakeLLM, FakeTelegram

ROOT = Path(__file__).resolve().parent.parent


def without_bytecode_ban(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without PYTHONDONTWRITEBYTECODE (set in some shells and CI images): the virtualenvs are
    installed without bytecode (``pip --no-compile``), so each process started with it set would compile
    every module it imports from source again, seconds of CPU for aiogram alone."""
    return {k: v for k, v in environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def clean_env() -> dict[str, str]:
    """The test's environment without the bot's keys. They are set empty rather than left out, because the
    environment wins over the project's ``.env``, which a developer's checkout may have filled in."""
    env = without_bytecode_ban(os.environ)
    env = {k: v for k, v in env.items() if not k.startswith(("TELEGRAM_", "LLM_"))}
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


async def stop_bot(proc: asyncio.subprocess.Process, timeout: float = 60) -> str:
    """SIGTERM, then everything the process printed; the stop must be clean (exit code 0)."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    output = (await asyncio.wait_for(proc.communicate(), timeout))[0].decode()
    assert proc.returncode == 0, output
    return output


class Terminal:
    """``python bot.py console`` in a pseudo-terminal, as a person sees it: everything it showed, and typing."""

    def __init__(self, proc: asyncio.subprocess.Process, primary: int) -> None:
        self.proc = proc
        self.primary = primary
        self.screen = bytearray()
        self.changed = asyncio.Event()

    def on_readable(self) -> None:
        try:
            self.screen.extend(os.read(self.primary, 4096))
        except OSError:  # the child closed the terminal
            asyncio.get_running_loop().remove_reader(self.primary)
        self.changed.set()

    def type(self, keys: str | bytes) -> None:
        os.write(self.primary, keys.encode() if isinstance(keys, str) else keys)

    async def read_until(self, marker: str, timeout: float = 90, start: int = 0) -> str:
        """What was shown from ``start`` once ``marker`` is among it."""
        deadline = asyncio.get_running_loop().time() + timeout
        while marker.encode() not in self.screen[start:]:
            assert asyncio.get_running_loop().time() < deadline, \
                f"{marker!r} never shown; screen: {self.screen.decode(errors='replace')!r}"
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)
        return self.screen[start:].decode(errors="replace")

    async def type_until(self, line: str, marker: str, timeout: float = 90) -> str:
        """Type a line (Enter included) and return what it brought up to ``marker``."""
        start = len(self.screen)
        if line:
            self.type(f"{line}\r")
        return await self.read_until(marker, timeout, start)


@contextlib.asynccontextmanager
async def console_terminal(env: dict[str, str], cwd: Path) -> AsyncIterator[Terminal]:
    """The console in a pseudo-terminal (TERM set, nobody answering cursor queries); killed if still running."""
    env = env | {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    primary, secondary = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", cwd=cwd, env=env,
        stdin=secondary, stdout=secondary, stderr=secondary,
    )
    os.close(secondary)
    terminal = Terminal(proc, primary)
    loop = asyncio.get_running_loop()
    os.set_blocking(primary, False)
    loop.add_reader(primary, terminal.on_readable)
    try:
        yield terminal
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        loop.remove_reader(primary)
        os.close(primary)
