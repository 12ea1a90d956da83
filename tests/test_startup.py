"""Starting ``python bot.py``: failures are one clear line and exit code 2, commands import only what they
need, and read-only commands never create a database."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
    code, out, err = await run_cli(env, tmp_path)
    assert code == 2, err
    assert expected in only_line(err)
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


@pytest.mark.parametrize("args", [["--help"], ["restore", "--help"]])
async def test_help_imports_none_of_the_heavy_libraries(tmp_path: Path, args: list[str]) -> None:
    assert not heavy_imports(await imported_modules(tmp_path, clean_env(), *args))


async def test_memories_imports_no_telegram_llm_or_jieba(tmp_path: Path) -> None:
    storage = await Storage.open(tmp_path / "data" / "memory.sqlite3")
    await storage.close()
    env = clean_env() | {"DATA_DIR": str(tmp_path / "data")}
    found = heavy_imports(await imported_modules(tmp_path, env, "memories", "1"))
    # pandas still comes with the table formatter (companion/ops/table.py).
    assert found <= {"pandas"}


async def imported_modules(cwd: Path, env: dict[str, str], *args: str) -> set[str]:
    code, _out, err = await run_cli(env, cwd, *args, python_flags=("-X", "importtime"))
    assert code == 0, err
    return {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}


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
