"""Group chats end to end: ``python bot.py`` as a real process against the fake Telegram and LLM servers.
Two users, two groups and private chats: "叫我老王" in group 1 and "叫我王总" in group 2 become two memories
of two scopes that never meet in any LLM request, in private chats or for the other user."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import request_text
from tests.process import ROOT, bot_env
from tests.scripted import ScriptedBrain, is_extraction
from tests.support import table_of

A, B = 7001, 7002
G1, G2 = -1007001, -1007002
BOT = "companion_bot"
LAOWANG = {"event": "用户希望被叫作老王", "keywords": ["老王", "称呼"], "importance": 90, "validity": "permanent",
           "type": "instruction"}
WANGZONG = {"event": "用户希望被叫作王总", "keywords": ["王总", "称呼"], "importance": 90, "validity": "permanent",
            "type": "instruction"}


def variable_text(body: dict[str, Any]) -> str:
    """What a request carries beyond the fixed prompts: for extraction the known memories and the
    dialogue (its instructions quote "叫我老王" as an example), for a reply every message but the system one."""
    if is_extraction(body):
        text = request_text(body)
        known = text.split("已经记住的相关内容", 1)[-1].split("如果新信息取代", 1)[0]
        return f"{known}\n{text.split('对话：', 1)[-1]}"
    return "\n".join(str(m.get("content")) for m in body["messages"] if m.get("role") != "system")


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram(bot_username=BOT) as tg, FakeLLM() as llm:
        yield tg, llm


def memories_of(db: Path, key: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        table = table_of(conn, key)
        if table is None:
            return []
        return [str(r[0]) for r in conn.execute(f'SELECT event FROM "{table}" WHERE status = \'active\'')]
    finally:
        conn.close()


async def wait_until(check: Any, what: str, timeout: float = 20) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


async def test_two_users_two_groups_memories_never_meet(servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = servers
    ScriptedBrain(facts={"叫我老王": LAOWANG, "叫我王总": WANGZONG}).install(llm)
    env = bot_env(tg, llm, tmp_path)
    env.update(EXTRACT_EVERY_MIN="1", EXTRACT_EVERY_MAX="1")
    tg.add_group(G1, "一群", admins=(A,))
    tg.add_group(G2, "二群")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    db = tmp_path / "data" / "memory.sqlite3"

    async def group(user: int, chat: int, text: str, expect: int | None, **kw: Any) -> dict[str, Any]:
        tg.push_group_text(user, chat, text, **kw)
        if expect is None:
            return {}
        return (await tg.wait_for_messages(chat, expect, timeout=20))[-1]

    async def extracted(count: int) -> None:
        await llm.wait_for_requests(count, is_extraction, timeout=20)

    try:
        await tg.wait_for_call("setMyCommands", timeout=30, count=4)
        assert {"all_private_chats", "all_group_chats", "all_chat_administrators"} <= set(tg.menus_by_type())

        for chat, expect in ((G1, 1), (G2, 1)):
            await group(A, chat, f"/start_aiGF@{BOT}", expect, first_name="王", last_name="大锤")
        await group(B, G1, f"/start_aiGF@{BOT}", 2, first_name="李四")
        tg.push_text(A, "/start_aiGF")
        await tg.wait_for_messages(A, 1, timeout=20)

        await group(B, G1, "今天天气真好", None, first_name="李四")  # unaddressed: no answer
        asked = await group(A, G1, f"@{BOT} 叫我老王", 3, first_name="王", last_name="大锤")
        assert asked["reply_to"] is not None
        await extracted(1)
        await group(A, G2, f"@{BOT} 叫我王总", 2, first_name="王", last_name="大锤")
        await extracted(2)
        await wait_until(lambda: memories_of(db, f"cn{-G1}_u{A}") and memories_of(db, f"cn{-G2}_u{A}"),
                         "both group memories stored")

        await group(A, G1, f"@{BOT} 你该怎么叫我", 4, first_name="王", last_name="大锤")
        latest = request_text(llm.chat_requests()[-1])
        assert "被叫作老王" in latest and "王总" not in latest
        await group(A, G2, f"@{BOT} 你该怎么叫我", 3, first_name="王", last_name="大锤")
        latest = request_text(llm.chat_requests()[-1])
        assert "被叫作王总" in latest and "老王" not in latest
        tg.push_text(A, "你该怎么叫我")
        await tg.wait_for_messages(A, 2, timeout=20)
        latest = request_text(llm.chat_requests()[-1])
        assert "老王" not in latest and "王总" not in latest, "a group memory reached a private chat"
        await group(B, G1, f"@{BOT} 你该怎么叫我", 5, first_name="李四")
        latest = request_text(llm.chat_requests()[-1])
        assert "被叫作老王" not in latest, "A's memory was used for B"
        assert "天气真好" in latest and "李四" in latest, "the group's context lost who said what"
        await llm.wait_for_requests(4, is_extraction, timeout=20)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "被叫作" not in output, "memory text reached the log above DEBUG"

    # Every request the model ever saw: the two memories never meet, and extraction only ever reads
    # one speaker of one chat.
    for body in llm.requests:
        text = variable_text(body)
        assert not ("老王" in text and "王总" in text), text
        if is_extraction(body):
            assert "天气真好" not in text and "李四" not in text, "another member's words were extracted"
    assert [m.split(" ", 1)[-1] for m in memories_of(db, f"cn{-G1}_u{A}")] == ["用户希望被叫作老王"]
    assert [m.split(" ", 1)[-1] for m in memories_of(db, f"cn{-G2}_u{A}")] == ["用户希望被叫作王总"]
    assert memories_of(db, f"u{A}") == [] and memories_of(db, f"cn{-G1}_u{B}") == []
