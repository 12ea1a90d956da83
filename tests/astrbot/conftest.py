"""Real AstrBot (pinned, in its own virtualenv) running the built plugin against the fake LLM.

The virtualenv is ``~/.cache/companion-memory-tests/astrbot-4.14.6/`` (``ASTRBOT_VENV`` points at another one),
and the newest AstrBot's ``astrbot-4.29.3-py312/`` beside it when a Python 3.12 is found: made on first use (a few
minutes: AstrBot has ~140 dependencies) and reused after. The session starts building both in the
background as soon as it has collected tests that need them, and runs these tests last, so the build
overlaps the rest of the suite; the fixtures below wait for it (tests/astrbot/venvs.py). Nothing here
skips but the newest AstrBot's test on a machine without Python 3.12: a machine that cannot build a
virtualenv fails the tests, in CI too."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from companion.hosts.astrbot.build import NAME, build
from tests.astrbot.model import script
from tests.astrbot.venvs import Venv, newest, pinned, python_of
from tests.fakes import FakeLLM
from tests.process import without_bytecode_ban

HARNESS = Path(__file__).with_name("harness.py")
REPLY_TIMEOUT = 90


@pytest.fixture(scope="session")
def astrbot_python() -> Path:
    """The pinned AstrBot's Python, once its virtualenv is built."""
    return python_of(pinned())


@pytest.fixture(scope="session")
def newest_python() -> Path:
    """The newest AstrBot's Python (in a virtualenv made from Python 3.12), once it is built."""
    venv: Venv | None = newest()
    if venv is None:
        pytest.skip("no Python 3.12 interpreter for the newest AstrBot (the pinned 4.14.6 runs in test_plugin)")
    return python_of(venv)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``make astrbot-plugin``'s folder and zip."""
    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def built_plugin(built: tuple[Path, Path]) -> Path:
    return built[0]


class AstrBot:
    """One AstrBot process; ``send`` is one message through its pipeline, answered with the replies."""

    def __init__(self, process: asyncio.subprocess.Process, ready: dict[str, Any]) -> None:
        self.process = process
        self.ready = ready

    async def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write((json.dumps(command, ensure_ascii=False) + "\n").encode())
        await self.process.stdin.drain()
        line = await asyncio.wait_for(self.process.stdout.readline(), REPLY_TIMEOUT)
        assert line, "AstrBot exited"
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def send(self, text: str, *, sender: str, platform: str = "qq", group: str = "") -> list[str]:
        answer = await self._ask({"op": "send", "platform": platform, "sender": sender, "group": group,
                                  "text": text})
        self.files: list[str] = answer["files"]
        replies: list[str] = answer["replies"]
        return replies

    async def install(self, archive: Path, scratch: Path) -> bool:
        """Install the plugin from a copy of its zip (AstrBot deletes the zip it installed)."""
        copy = scratch / archive.name
        shutil.copyfile(archive, copy)
        installed: bool = (await self._ask({"op": "install", "zip": str(copy)}))["installed"]
        return installed

    async def install_url(self, url: str, proxy: str) -> bool:
        installed: bool = (await self._ask({"op": "install_url", "url": url, "proxy": proxy}))["installed"]
        return installed

    async def weekly(self, now: datetime) -> int:
        sent: int = (await self._ask({"op": "weekly", "now": now.isoformat()}))["sent"]
        return sent

    async def followups(self, now: datetime) -> int:
        sent: int = (await self._ask({"op": "followups", "now": now.isoformat()}))["sent"]
        return sent

    async def measure(self) -> dict[str, float]:
        return await self._ask({"op": "measure"})

    async def stop(self) -> None:
        if self.process.returncode is None:
            try:
                await self._ask({"op": "stop"})
            finally:
                with_timeout = asyncio.wait_for(self.process.wait(), 30)
                try:
                    await with_timeout
                except TimeoutError:
                    self.process.kill()
                    await self.process.wait()


async def start_astrbot(python: Path, root: Path, llm: FakeLLM, *, plugin: bool = True, telegram: str = "",
                        settings: dict[str, Any] | None = None) -> AstrBot:
    """AstrBot on ``root`` (``plugin=False``: alone, a benchmark's baseline), once it is ready for messages;
    ``telegram``: with AstrBot's Telegram adapter on that Bot API; ``settings``: the plugin's config, as the
    WebUI saves it."""
    root.mkdir(parents=True, exist_ok=True)
    if settings is not None:
        config = root / "data" / "config" / f"{NAME}_config.json"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(settings), encoding="utf-8")
    log = (root / "astrbot.log").open("ab")
    flags = (*(() if plugin else ("--no-plugin",)), *(("--telegram", telegram) if telegram else ()))
    process = await asyncio.create_subprocess_exec(
        str(python), str(HARNESS), str(root), f"{llm.base_url}/v1", *flags,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log, cwd=root, limit=2**22,
        env=without_bytecode_ban(os.environ),
    )
    log.close()
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 180)
    if not line:
        await process.wait()
        raise AssertionError("AstrBot did not start:\n" + (root / "astrbot.log").read_text(errors="replace")[-4000:])
    return AstrBot(process, json.loads(line))


def install(plugin: Path, root: Path) -> None:
    """Copy the built plugin folder into AstrBot's plugins folder, as a user installing it by hand does."""
    target = root / "data" / "plugins" / NAME
    if not target.exists():
        shutil.copytree(plugin, target)


class Rig:
    """One AstrBot root shared by a module's tests (AstrBot takes ~20 s to start): its process, the fake
    model it talks to, and a restart on the same data."""

    def __init__(self, python: Path, root: Path, llm: FakeLLM, bot: AstrBot, telegram: str = "") -> None:
        self.python, self.root, self.llm, self.bot, self.telegram = python, root, llm, bot, telegram

    @property
    def data(self) -> Path:
        return self.root / "data" / "plugin_data" / NAME

    async def restart(self) -> None:
        await self.bot.stop()
        self.bot = await start_astrbot(self.python, self.root, self.llm, telegram=self.telegram)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(astrbot_python: Path, built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> AsyncIterator[Rig]:
    """AstrBot without the plugin, which is then installed from its zip as the WebUI's upload does."""
    root = tmp_path_factory.mktemp("astrbot")
    async with FakeLLM() as llm:
        llm.responder = script
        shared = Rig(astrbot_python, root, llm, await start_astrbot(astrbot_python, root, llm))
        try:
            assert await shared.bot.install(built[1], tmp_path_factory.mktemp("upload"))
            yield shared
        finally:
            await shared.bot.stop()
