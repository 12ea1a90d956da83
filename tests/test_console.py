"""The terminal console: line editing, commands handled locally, Ctrl-C/Ctrl-D leave at once, logs kept
out of the prompt."""

from __future__ import annotations

import asyncio
import io
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prompt_toolkit import PromptSession
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.input.base import PipeInput
from prompt_toolkit.output import DummyOutput

from companion.chat import texts
from companion.core.models import Scope
from companion.hosts.console import HELP, prompt_reader, run_console
from tests.fakes import FakeLLM
from tests.process import ROOT, clean_env, console_terminal
from tests.scripted import user_words
from tests.support import Rig

ME = Scope(77)
LEFT = "\x1b[D"


@contextmanager
def console_input() -> Iterator[tuple[PipeInput, PromptSession[str]]]:
    with create_pipe_input() as pipe:
        yield pipe, PromptSession[str](input=pipe, output=DummyOutput())


async def wait_until(ready: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_arrow_keys_edit_the_line_and_commands_stay_local(rig: Rig) -> None:
    rig.llm.set_chat_reply("收到")
    out = io.StringIO()
    with console_input() as (pipe, session):
        console = asyncio.create_task(run_console(rig.chat, ME, prompt_reader(session), out))
        await wait_until(lambda: texts.GREETING_NEW in out.getvalue())
        pipe.send_text(f"今天累{LEFT}{LEFT}好\r")  # two steps left, insert: "今好天累"
        await wait_until(lambda: "小伴> 收到" in out.getvalue())
        pipe.send_text("/help\r")
        await wait_until(lambda: HELP in out.getvalue())
        pipe.send_text("/stop_aiGF\r")
        await wait_until(lambda: texts.STOPPED in out.getvalue())
        pipe.send_text("还在吗\r")
        await wait_until(lambda: texts.NOT_STARTED in out.getvalue())
        pipe.send_text("/start_aiGF\r")
        await wait_until(lambda: out.getvalue().count("小伴> 又见面") + out.getvalue().count("小伴> 嗨") == 2)
        pipe.send_text("\x03")  # Ctrl-C
        await asyncio.wait_for(console, 5)
    assert [user_words(r["messages"][-1]["content"]) for r in rig.llm.chat_requests()] == ["今好天累"]
    assert "\x1b" not in out.getvalue()


async def test_ctrl_d_leaves_at_once(rig: Rig) -> None:
    out = io.StringIO()
    with console_input() as (pipe, session):
        console = asyncio.create_task(run_console(rig.chat, ME, prompt_reader(session), out))
        await wait_until(lambda: texts.GREETING_NEW in out.getvalue())
        pipe.send_text("\x04")
        await asyncio.wait_for(console, 5)
    assert rig.llm.chat_requests() == []


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def test_ctrl_c_ends_piped_console_without_waiting_for_a_line(fake_llm: FakeLLM, tmp_path: Path) -> None:
    env = clean_env() | {"LLM_API_KEY": "sk-console", "LLM_BASE_URL": fake_llm.base_url,
                         "DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        # As a terminal starts it: a shell's background job (`make test &`) ignores SIGINT, and an
        # ignored signal is inherited, so Python would never see the Ctrl-C this test sends.
        preexec_fn=_sigint_default,
    )
    assert proc.stdout is not None
    while texts.GREETING_NEW.encode() not in await asyncio.wait_for(proc.stdout.readline(), 90):
        pass
    proc.send_signal(signal.SIGINT)  # stdin stays open: nothing more will ever be typed
    # Waiting for a line would never end; the bound only has to allow the stop's own wind-down
    # (STOP_TIMEOUT_SECONDS, 8 s by default) on a loaded machine.
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(f"the console did not end after Ctrl-C: {err.decode()[-2000:]}") from None
    assert proc.returncode == 130


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
async def test_terminal_console_keeps_log_lines_out_of_the_prompt(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.fail_next(1, status=500)  # the reply fails: a WARNING is logged while the user is at the prompt
    env = clean_env() | {"LLM_API_KEY": "sk-console", "LLM_BASE_URL": fake_llm.base_url, "LLM_MAX_RETRIES": "0",
                         "DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups")}
    async with console_terminal(env, tmp_path) as term:
        await term.read_until(texts.GREETING_NEW)
        term.type(f"你好{LEFT}呀\r")
        await term.read_until(texts.LLM_DOWN)
        after_reply = term.screen.index(texts.LLM_DOWN.encode())
        await term.read_until("你>", 15, after_reply)  # the next prompt is up
        term.type(b"\x04")  # Ctrl-D
        await asyncio.wait_for(term.proc.wait(), 15)
    proc, screen = term.proc, term.screen
    shown = screen.decode(errors="replace")
    log = (tmp_path / "data" / "console.log").read_text(encoding="utf-8")
    assert "reply failed" in log
    assert "WARNING" not in shown and "reply failed" not in shown
    assert user_words(fake_llm.chat_requests()[-1]["messages"][-1]["content"]) == "你呀好"
    assert proc.returncode == 0
