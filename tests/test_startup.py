"""Starting ``python bot.py``: failures are one clear line and exit code 2, commands import only what they
need, and read-only commands never create a database."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.config.settings import LOCAL_KEY
from companion.storage.sqlite import SQLiteStore as Storage
from tests.fakes import FakeLLM, FakeTelegram
from tests.process import ROOT, bot_env, clean_env, run_cli, start_bot

HEAVY = ("aiogram", "openai", "jieba", "pandas")


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM(api_key="sk-e2e") as llm:
        yield tg, llm


def only_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got:\n{err}"
    return lines[0]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"TELEGRAM_BOT_TOKEN": "not a token"}, "TELEGRAM_BOT_TOKEN is malformed"),
        ({"TELEGRAM_BOT_TOKEN": "999999:WRONGsecret"}, "Telegram rejected the token"),
        ({"TELEGRAM_API_BASE": "http://127.0.0.1:{port}"}, "cannot reach the Telegram API at http://127.0.0.1:"),
        ({"LLM_API_KEY": "sk-WRONGsecret"}, "the LLM rejected the API key"),
    ],
    ids=["malformed-token", "wrong-token", "no-route", "wrong-llm-key"],
)
async def test_start_up_failure_is_one_clear_line_and_exit_2(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path, change: dict[str, str], expected: str
) -> None:
    tg, llm = servers
    env = bot_env(tg, llm, tmp_path, **{k: v.format(port=closed_port()) for k, v in change.items()})
    code, out, err = await run_cli(env, tmp_path, python_flags=("-X", "importtime"))
    err, modules = split_import_times(err)
    assert code == 2, err
    assert expected in only_line(err)
    # Found before aiogram, openai, jieba and pandas (seconds of CPU) are imported: a second at most.
    assert not heavy_imports(modules)
    for secret in ("not a token", "WRONGsecret", "sk-e2e", tg.token):
        assert secret not in err + out, "a secret reached the output"
    assert not [name for name, _ in tg.calls if name == "getUpdates"], "the bot must not start polling"


async def test_llm_out_of_reach_at_start_up_is_a_warning_not_a_stop(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    """Replies degrade to a friendly "the model is down" until it is back: better than not running."""
    tg, llm = servers
    env = bot_env(tg, llm, tmp_path, LLM_BASE_URL=f"http://127.0.0.1:{closed_port()}")
    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("getUpdates", timeout=90)  # a loaded CI machine starts the process slowly
    finally:
        proc.terminate()
        output = (await proc.communicate())[0].decode()
    assert proc.returncode == 0, output
    assert "cannot reach the LLM" in output and "Traceback" not in output


@pytest.mark.parametrize(
    ("command", "missing", "where"),
    [
        ([], "Missing required settings TELEGRAM_BOT_TOKEN and LLM_API_KEY: set them in .env",
         ["@BotFather", "https://platform.deepseek.com", "OpenAI-compatible"]),
        (["console"], "Missing required setting LLM_API_KEY: set it in .env",
         ["https://platform.deepseek.com", "OpenAI-compatible"]),
    ],
    ids=["bot", "console"],
)
async def test_empty_environment_is_one_line_before_any_heavy_import(
    tmp_path: Path, command: list[str], missing: str, where: list[str]
) -> None:
    env = clean_env() | {"DATA_DIR": str(tmp_path / "data")}
    code, _out, err = await run_cli(env, tmp_path, *command, python_flags=("-X", "importtime"))
    err, modules = split_import_times(err)
    assert code == 2
    line = only_line(err)
    assert missing in line and all(part in line for part in where), line
    assert "TELEGRAM_BOT_TOKEN" not in line or command == []  # the console needs no Telegram token
    assert not heavy_imports(modules)
    assert not (tmp_path / "data").exists()


async def test_console_with_a_local_server_needs_no_key_and_no_telegram_token(
    fake_llm: FakeLLM, tmp_path: Path
) -> None:
    """As with a local Ollama or llama.cpp (docs/console.md): LLM_BASE_URL and LLM_MODEL only."""
    env = clean_env() | {"LLM_BASE_URL": fake_llm.base_url, "LLM_MODEL": "qwen2.5:7b",
                         "DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", env=env, cwd=tmp_path,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    script = "记住：我对花生过敏\n我对什么过敏？\n/quit\n"
    out, err = await asyncio.wait_for(proc.communicate(script.encode()), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "记住了：我对花生过敏" in out.decode()
    asked = [r for r in fake_llm.requests if "我对什么过敏" in str(r["messages"][-1].get("content"))]
    assert asked, "the question never reached the model"
    # The fact is recalled into the next reply's prompt, sent to the local model under its own name.
    assert all(r["model"] == "qwen2.5:7b" for r in fake_llm.requests)
    assert any("花生过敏" in str(m.get("content")) for r in asked for m in r["messages"][:-1])
    assert {h.get("Authorization") for h in fake_llm.headers} == {f"Bearer {LOCAL_KEY}"}


@pytest.mark.parametrize("args", [["--help"], ["restore", "--help"]])
async def test_help_imports_none_of_the_heavy_libraries(tmp_path: Path, args: list[str]) -> None:
    assert not heavy_imports(await imported_modules(tmp_path, clean_env(), *args))


async def test_memories_imports_no_telegram_llm_or_jieba(tmp_path: Path) -> None:
    storage = await Storage.open(tmp_path / "data" / "memory.sqlite3")
    await storage.close()
    env = clean_env() | {"DATA_DIR": str(tmp_path / "data")}
    found = heavy_imports(await imported_modules(tmp_path, env, "memories", "1"))
    # pandas still comes with the table formatter (companion/ops/admin/table.py).
    assert found <= {"pandas"}


async def imported_modules(cwd: Path, env: dict[str, str], *args: str) -> set[str]:
    code, _out, err = await run_cli(env, cwd, *args, python_flags=("-X", "importtime"))
    assert code == 0, err
    return {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}


def split_import_times(err: str) -> tuple[str, set[str]]:
    """stderr without ``-X importtime``'s lines, and the modules those lines name."""
    lines = err.splitlines()
    modules = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    return "\n".join(line for line in lines if not line.startswith("import time:")), modules


def heavy_imports(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules} & set(HEAVY)


@pytest.mark.parametrize("command", [["memories", "1"], ["decay"], ["backup"]])
async def test_commands_on_a_missing_database_create_nothing(tmp_path: Path, command: list[str]) -> None:
    env = clean_env() | {"DATA_DIR": str(tmp_path / "nowhere"), "BACKUP_DIR": str(tmp_path / "backups")}
    code, _out, err = await run_cli(env, tmp_path, *command)
    assert code == 2
    assert f"no database at {tmp_path / 'nowhere' / 'memory.sqlite3'}" in only_line(err)
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "data").exists()


async def test_relative_data_dir_counts_from_the_project_folder_not_the_working_folder(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = clean_env() | {"DATA_DIR": "no-such-folder-for-tests"}
    code, _out, err = await run_cli(env, elsewhere, "memories", "1")
    assert code == 2
    assert f"no database at {ROOT / 'no-such-folder-for-tests' / 'memory.sqlite3'}" in only_line(err)
    assert not (elsewhere / "no-such-folder-for-tests").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("installed", [False, True], ids=["first-run", "installed"])
def test_make_run_says_it_is_installing_before_it_installs(tmp_path: Path, installed: bool) -> None:
    venv = tmp_path / "venv"
    if installed:
        venv.mkdir()
        (venv / ".runtime").touch()  # newer than requirements.txt: nothing to install
    # -n: print the recipe without running it (no virtualenv is created, nothing is downloaded).
    plan = subprocess.run(["make", "-n", "-C", str(ROOT), "run", f"VENV={venv}"],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    installing = [i for i, line in enumerate(plan) if line.startswith("echo") and "Installing" in line]
    pip = [i for i, line in enumerate(plan) if "pip install" in line]
    if installed:
        assert not installing and not pip
        return
    assert installing and pip and installing[0] < pip[0], plan
    assert "minutes" in plan[installing[0] + 1]
