"""The plugin's switches and its failures, inside real AstrBot: with tools, learning and profiles off (the
WebUI's settings) the model is offered no memory tool and asked nothing in the background, yet memories
are still told; a plugin whose database is unreadable costs AstrBot nothing but the memories: the user
still gets the model's reply, and the log one line naming the cause (issue 20)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.astrbot.conftest import Rig, install, start_astrbot
from tests.astrbot.model import is_job, memory_block, reply_to, script
from tests.fakes import FakeLLM

pytestmark = pytest.mark.asyncio(loop_scope="module")

OFF = {"tools": False, "learning": False, "profile": False, "learn_every": 1}
FAILED = "[companion_memory] memory injection failed, AstrBot goes on without memory: "


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def quiet(astrbot_python: Path, built_plugin: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> AsyncIterator[Rig]:
    root = tmp_path_factory.mktemp("astrbot")
    install(built_plugin, root)
    async with FakeLLM() as llm:
        llm.responder = script
        rig = Rig(astrbot_python, root, llm, await start_astrbot(astrbot_python, root, llm, settings=OFF))
        try:
            yield rig
        finally:
            await rig.bot.stop()


async def test_tools_and_learning_off_offer_no_tool_and_ask_nothing_yet_memories_are_told(quiet: Rig) -> None:
    await quiet.bot.send("/增加记忆 tina 喜欢喝乌龙茶 8", sender="admin1")
    quiet.llm.requests.clear()
    for text in ("今天吃什么", "记住：我下周去北京", "周末干嘛"):
        assert await quiet.bot.send(text, sender="tina") == ["嗯嗯。"]
    assert quiet.llm.requests and not [r for r in quiet.llm.requests if is_job(r)]
    offered = {t["function"]["name"] for r in quiet.llm.requests for t in r.get("tools") or []}
    assert not {name for name in offered if name.startswith("companion_memory_")}, offered
    assert "喜欢喝乌龙茶" in memory_block(reply_to(quiet.llm.requests))


async def test_an_unreadable_database_costs_astrbot_nothing_but_the_memories(quiet: Rig) -> None:
    await quiet.bot.stop()
    database = quiet.data / "memory.sqlite3"
    for spare in database.parent.glob("memory.sqlite3-*"):
        spare.unlink()
    database.write_bytes(b"this is not a database " * 200)
    await quiet.restart()
    quiet.llm.requests.clear()
    assert await quiet.bot.send("我的暗号是青蛙王子", sender="tina") == ["嗯嗯。"]
    assert "喜欢喝乌龙茶" not in memory_block(reply_to(quiet.llm.requests))
    lines = [line for line in (quiet.root / "astrbot.log").read_text(errors="replace").splitlines()
             if FAILED in line]
    assert len(lines) == 1 and "file is not a database" in lines[0], lines  # one line for one request
    assert not any("青蛙王子" in line or "乌龙茶" in line for line in lines)
