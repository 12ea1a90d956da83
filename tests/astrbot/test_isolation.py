"""Hypothesis over platforms, groups, members and private chats, through real AstrBot: no request to the
model ever holds another scope's memory (issue 20). One AstrBot serves every example; few examples, so
``make test`` stays fast (FUZZ_EXAMPLES raises them)."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.hosts.astrbot.build import NAME
from tests.astrbot.conftest import install, start_astrbot
from tests.astrbot.model import memory_block, saved, script
from tests.fakes import FakeLLM

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4"))
PLACES = st.tuples(st.sampled_from(["qq", "lark"]), st.sampled_from(["", "g1", "g2"]),
                   st.sampled_from(["ann", "ben", "cat"]))


def test_no_request_holds_another_scopes_memory(astrbot_python: Path, built_plugin: Path, tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    llm = FakeLLM()
    llm.responder = script
    loop.run_until_complete(llm.start())
    root = tmp_path / "astrbot"
    install(built_plugin, root)
    bot = loop.run_until_complete(start_astrbot(astrbot_python, root, llm))
    numbers = itertools.count()
    owners: dict[str, tuple[str, str, str]] = {}

    async def say(place: tuple[str, str, str], text: str) -> str:
        platform, group, sender = place
        llm.requests.clear()
        await bot.send(f"/{text}" if group else text, sender=sender, group=group, platform=platform)
        replies = [r for r in llm.requests if r.get("tools")]  # not the learning calls that follow
        return memory_block(replies[-1]) if replies else ""

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(PLACES, min_size=2, max_size=4))
    def check(places: list[tuple[str, str, str]]) -> None:
        for place in places:
            secret = f"暗号{next(numbers)}号"
            owners[saved(secret)] = place
            loop.run_until_complete(say(place, f"记住：{secret}"))
        for place in places:
            block = loop.run_until_complete(say(place, "我们聊点什么"))
            leaked = [text for text, owner in owners.items() if owner != place and text in block]
            assert not leaked, (place, leaked)
            mine = [text for text, owner in owners.items() if owner == place]
            assert any(text in block for text in mine), (place, block)

    try:
        check()
    finally:
        loop.run_until_complete(bot.stop())
        loop.run_until_complete(llm.stop())
        loop.close()
    assert (root / "data" / "plugin_data" / NAME / "memory.sqlite3").exists()
