"""One bad character never blocks a user: a NUL in a message (which PostgreSQL's text refuses) or an emoji
sequence is stored the same way on every backend, and the user's next turns go on."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from companion.chat import texts
from companion.core.models import Scope
from tests.groupkit import group_bot
from tests.pgtest import pg_schema

USER = 5151
FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_a_nul_in_a_message_is_stored_alike_and_the_next_turn_goes_on(backend: str, tmp_path: Path) -> None:
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(pg_schema()) if backend == "postgresql" else ""
        g = await stack.enter_async_context(group_bot(tmp_path, database_url=url))
        await g.private(USER, "/start_aiGF")
        g.llm.set_chat_reply("好的")
        await g.private(USER, "记住：我对花生\x00过敏")
        await g.private(USER, f"今天全家{FAMILY}去公园\x00了")
        g.llm.set_chat_reply("在呢")
        await g.private(USER, "在吗")
        sent = [m["text"] for m in g.tg.sent_messages(USER)]
        assert texts.INTERNAL_ERROR not in sent and sent[-1] == "在呢"
        turns = await g.engine.recent_turns(Scope(USER), 10)
        said = [turn.user for turn in turns]
        assert f"今天全家{FAMILY}去公园\ufffd了" in said, said  # the family stays one emoji, the NUL is U+FFFD
        assert not any("\x00" in text for text in said)
        events = [m.event for m in await g.engine.memories(Scope(USER))]
        assert any("花生" in event and "过敏" in event and "\x00" not in event for event in events), events
