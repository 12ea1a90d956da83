"""One bad character never blocks a user: a NUL in a message (which PostgreSQL's text refuses) or an emoji
sequence is stored the same way on every backend, and the user's next turns go on."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from companion.chat import texts
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import Scope, Turn
from companion.core.timeutil import utcnow
from companion.llm.client import LLMClient
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.factory import open_store
from companion.storage.spool import SET_ASIDE, Spools
from tests.fakes import FakeLLM
from tests.groupkit import group_bot
from tests.pgtest import pg_schema
from tests.support import make_settings

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


@pytest.mark.postgresql
async def test_a_nul_turn_spooled_before_the_fix_is_set_aside_on_postgresql(tmp_path: Path) -> None:
    """A spool written by an older version may hold a NUL, which PostgreSQL refuses: the replay sets that
    turn aside and queues the rest, where it used to fail again on every replay."""
    settings = make_settings(tmp_path)
    async with contextlib.AsyncExitStack() as stack, FakeLLM() as llm:
        store = await open_store(await stack.enter_async_context(pg_schema()))
        stack.push_async_callback(store.close)
        client = LLMClient(api_key="sk-test", base_url=llm.base_url, model="deepseek-chat", max_retries=0, timeout=5)
        stack.push_async_callback(client.close)
        engine = await engine_on(store, settings, KeywordExtractor(), client)
        stack.push_async_callback(engine.close)
        dead, spools = Spools(settings.spool_dir), Spools(settings.spool_dir)
        stack.callback(spools.close)
        at = utcnow()
        await dead.own().keep(Scope(USER), [Turn("我对花生\x00过敏", "好", at), Turn("明天见", "嗯", at)])
        dead.close()
        chat = ChatService(engine, client, ChatConfig.from_settings(settings), spools=spools)
        assert await chat.replay_spools() == 1
        assert [t.user for t in await engine.pending_turns(Scope(USER), 10)] == ["明天见"]
        with sqlite3.connect(settings.spool_dir / SET_ASIDE) as conn:
            assert len(conn.execute("SELECT turn FROM spooled_turns").fetchall()) == 1
