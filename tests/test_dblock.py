"""One writer at a time: restore and maintenance refuse while the bot runs, the bot refuses while a
restore runs, and a killed holder leaves no stale lock."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.core.errors import ConfigError
from companion.ops.backup import dblock
from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, run_cli, start_bot

USER = 6001


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


def test_second_holder_is_refused_with_who_holds_it(tmp_path: Path) -> None:
    db = tmp_path / "data" / "memory.sqlite3"
    with dblock.hold(db, "the bot"):
        with pytest.raises(dblock.DatabaseInUseError) as caught, dblock.hold(db, "restore"):
            pass
        assert str(caught.value) == (
            f"the database {db} is in use by the bot (pid {os.getpid()}); wait for it to finish or stop it first"
        )
    with dblock.hold(db, "restore"):  # released on exit
        assert dblock.holder(db) == f"restore (pid {os.getpid()})"
    assert dblock.lock_path(db) == tmp_path / "data" / "memory.sqlite3.lock"


async def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    db = tmp_path / "memory.sqlite3"
    code = (
        "import sys, time; from pathlib import Path; from companion.ops.backup import dblock\n"
        f"with dblock.hold(Path({str(db)!r}), 'decay'):\n    print('held', flush=True); time.sleep(60)\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parent.parent
    )
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"held\n"
    with pytest.raises(dblock.DatabaseInUseError, match=rf"in use by decay \(pid {proc.pid}\)"), dblock.hold(
        db, "restore"
    ):
        pass
    proc.kill()
    await proc.wait()
    with dblock.hold(db, "restore"):
        pass


async def test_restore_and_decay_refuse_while_the_bot_runs(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    env = bot_env(tg, llm, tmp_path)
    bot = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("getUpdates", timeout=90)  # a loaded CI machine starts the process slowly
        tg.push_text(USER, "/start_aiGF")
        await tg.wait_for_messages(USER, 1)
        code, out, err = await run_cli(env, tmp_path, "backup")  # a reader: allowed while the bot runs
        assert code == 0, err
        (day,) = [p for p in (tmp_path / "backups").iterdir() if p.is_dir()]
        for command in (["restore", str(day), "--force"], ["decay"]):
            code, out, err = await run_cli(env, tmp_path, *command)
            assert code == 2, out + err
            assert err.strip().endswith(f"in use by the bot (pid {bot.pid}); wait for it to finish or stop it first")
            assert len(err.strip().splitlines()) == 1
        assert not list((tmp_path / "data").glob("*before-restore*")), "restore moved the live database"
    finally:
        bot.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(bot.communicate(), 30))[0].decode()
    assert bot.returncode == 0, output
    db = sqlite3.connect(tmp_path / "data" / "memory.sqlite3")
    try:
        assert db.execute("SELECT count(*) FROM scopes WHERE active = 1").fetchone()[0] == 1
    finally:
        db.close()
    code, out, err = await run_cli(env, tmp_path, "decay")
    assert code == 0, err


async def test_bot_refuses_to_start_while_a_restore_runs(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    with dblock.hold(tmp_path / "data" / "memory.sqlite3", "restore"):
        code, out, err = await run_cli(bot_env(tg, llm, tmp_path), tmp_path)
    assert code == 2, out + err
    assert err.strip() == (
        f"error: the database {tmp_path / 'data' / 'memory.sqlite3'} is in use by restore (pid {os.getpid()}); "
        "wait for it to finish or stop it first"
    )
    assert tg.calls == [], "the bot must not talk to Telegram"


@pytest.mark.parametrize("where", ["/proc/nope/memory.sqlite3", "/etc/passwd/memory.sqlite3"])
def test_a_database_where_none_can_be_is_a_config_error_naming_the_folder(where: str) -> None:
    named = r"the database folder /\w+/\w+ cannot be used: .*\(DATA_DIR, DATABASE_URL\)"
    with pytest.raises(ConfigError, match=named), dblock.hold(Path(where), "bot"):
        pass
