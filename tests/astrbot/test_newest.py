"""The plugin in the newest AstrBot (Python 3.12, ``~/.cache/companion-memory-tests/astrbot-4.29.3-py312/``),
when such an interpreter is
present: the main proof (a tool call saves in the speaker's scope, the next request carries it to them
only; an admin command is refused to others)."""

from __future__ import annotations

from pathlib import Path

from tests.astrbot.conftest import install, start_astrbot
from tests.astrbot.model import memory_block, saved, script
from tests.fakes import FakeLLM


async def test_the_newest_astrbot_keeps_each_speakers_memory_to_them(
    newest_python: Path, built_plugin: Path, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.responder = script
    install(built_plugin, tmp_path)
    bot = await start_astrbot(newest_python, tmp_path, fake_llm)
    try:
        assert await bot.send("/记住：我养了一只柯基", sender="ann", group="g1") == ["好的，记住了。"]
        for who, group, shown in (("ann", "g1", True), ("ben", "g1", False), ("ann", "", False)):
            fake_llm.requests.clear()
            await bot.send("/聊聊" if group else "聊聊", sender=who, group=group)
            chat = [r for r in fake_llm.requests if r.get("tools")][-1]
            assert (saved("我养了一只柯基") in memory_block(chat)) is shown, (who, group)
        assert not any(r.startswith("已为") for r in await bot.send("/增加记忆 ann 喜欢猫", sender="ben"))
        assert (await bot.send("/增加记忆 ann 喜欢猫", sender="admin1"))[0].startswith("已为 ann 增加记忆")
    finally:
        await bot.stop()
