"""The Dida365 kanban through ``python bot.py`` against the fake Telegram, the fake model and the fake
Dida365: linking with /dida_code, a saved memory as a card, the user's drag, completion, deletion and new
card reaching the memories, an outage and a revoked token losing nothing, and no secret or memory text
in the log at INFO."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from companion.kanban import card_texts as dida_texts
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.dida import CLIENT_ID, CLIENT_SECRET, FakeDida
from tests.process import bot_env, start_bot
from tests.scripted import ScriptedBrain, model_context

USER = 5301
ACCOUNT = "xiaoyu"

SAVES = {  # the save prompt's own example is "每周一不要打扰我": that trigger comes last
    "火锅": {"event": "喜欢吃火锅", "keywords": ["火锅"], "type": "preference", "importance": 65},
    "猫粮": {"event": "猫只吃鸡肉味猫粮", "keywords": ["猫粮", "鸡肉"], "type": "fact", "importance": 55},
    "牙医": {"event": "周五下午看牙医", "keywords": ["牙医"], "type": "event", "importance": 55},
    "钢琴": {"event": "在学钢琴", "keywords": ["钢琴"], "type": "fact", "importance": 55},
    "跑步": {"event": "每天早上跑步", "keywords": ["跑步"], "type": "fact", "importance": 55},
    "加班": {"event": "这个月经常加班", "keywords": ["加班"], "type": "event", "importance": 55},
    "每周一": {"event": "每周一不要打扰我", "keywords": ["周一", "打扰"], "type": "instruction", "importance": 80},
}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM, FakeDida]]:
    async with FakeTelegram() as tg, FakeLLM() as llm, FakeDida() as dida:
        yield tg, llm, dida


class Chat:
    def __init__(self, tg: FakeTelegram) -> None:
        self.tg, self.count = tg, 0

    async def say(self, text: str, answers: int = 1) -> str:
        self.tg.push_text(USER, text)
        self.count += answers
        sent = await self.tg.wait_for_messages(USER, self.count, timeout=30)
        return str(sent[self.count - 1]["text"])

    async def notice(self, text: str) -> None:
        """Wait for a message the bot sends unasked (a notice of the kanban)."""
        self.count += 1
        sent = await self.tg.wait_for_messages(USER, self.count, timeout=30)
        assert sent[self.count - 1]["text"] == text


async def test_the_kanban_through_the_bot_process(servers: tuple[FakeTelegram, FakeLLM, FakeDida],
                                                  tmp_path: Path) -> None:
    tg, llm, dida = servers
    ScriptedBrain(saves=SAVES).install(llm)
    env = bot_env(tg, llm, tmp_path, DIDA_CLIENT_ID=CLIENT_ID, DIDA_CLIENT_SECRET=CLIENT_SECRET,
                  DIDA_REDIRECT_URI="https://example.invalid/dida", DIDA_AUTH_BASE=dida.base_url,
                  DIDA_API_BASE=dida.base_url, DIDA_TOKEN_KEY=Fernet.generate_key().decode(),
                  DIDA_POLL_MINUTES="0.05")
    proc = await start_bot(env, tmp_path)
    chat = Chat(tg)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        assert "dida_link" in [c["command"] for c in tg.commands or []]  # offered: the operator configured it
        assert "/dida_link — 把记忆同步到你的滴答清单看板" in await chat.say("/help")
        await chat.say("/start_aiGF")
        link = await chat.say("/dida_link")
        assert f"{dida.base_url}/oauth/authorize?client_id={CLIENT_ID}" in link and "state=" in link
        assert (await chat.say(f"/dida_code {dida.grant_code(ACCOUNT)}")).startswith("已连接滴答清单")

        # A save becomes a card in the long-term column.
        assert "每周一不要打扰我" in await chat.say("记住：每周一不要打扰我")
        await dida.wait_for(lambda: any("每周一" in t["title"] for t in dida.cards(ACCOUNT)), what="the card")
        card = dida.card(ACCOUNT, "每周一")
        assert dida.column_name(ACCOUNT, card) == "长期记忆"
        for word in ("火锅", "猫粮", "牙医", "钢琴"):
            await chat.say(f"记住：{SAVES[word]['event']}")
        await dida.wait_for(lambda: len(dida.cards(ACCOUNT)) == 5, what="five cards")

        # Drag to the medium-term column: the memory moves, and its card its due date (the new review day).
        due = card["dueDate"]
        dida.user_move(ACCOUNT, card["id"], "中期记忆")
        await dida.wait_for(lambda: dida.card(ACCOUNT, "每周一")["dueDate"] != due, what="a new due date")
        listed = await chat.say("/memories")
        assert listed.index("【中期记忆】") < listed.index("每周一不要打扰我")

        # Complete -> archived; delete -> forgotten (two polls later) and never sent to the model again.
        dida.user_complete(ACCOUNT, dida.card(ACCOUNT, "火锅")["id"])
        dida.user_delete(ACCOUNT, dida.card(ACCOUNT, "猫粮")["id"])
        created = dida.user_create(ACCOUNT, "短期记忆", "下周三去看展")
        await dida.wait_for(lambda: "记忆编号" in dida.accounts[ACCOUNT].tasks[created]["content"],
                            what="the user's card adopted as a memory")
        await dida.wait_for(lambda: sum(1 for m, _, p in dida.api_calls if p.endswith("/data")) >= 8, within=40,
                            what="polls")
        listed = await chat.say("/memories")
        assert "火锅" not in listed and "猫粮" not in listed
        # The card made in the app says "下周三": adopted as the date it names, as a save would be.
        assert re.search(r"\d+月\d+日（周三）去看展", listed) and "下周三" not in listed, listed
        await chat.say("我家猫最近不爱吃猫粮")
        assert "鸡肉味" not in model_context(llm.chat_requests()[-1])

        # An outage: changes made meanwhile all arrive after it, once each.
        dida.down = True
        await chat.say("记住：每天早上跑步")
        await chat.say("记住：这个月经常加班")
        project = dida.project(ACCOUNT)
        assert project is not None
        await dida.wait_for(lambda: ("GET", f"/open/v1/project/{project['id']}/data") in dida.http_log[-3:],
                            what="a try during the outage")
        dida.down = False
        await dida.wait_for(lambda: {"每天早上跑步", "这个月经常加班"} <= {t["title"] for t in dida.cards(ACCOUNT)},
                            what="the changes made during the outage")
        titles = [t["title"] for t in dida.cards(ACCOUNT)]
        assert len(titles) == len(set(titles)) == 6

        # A revoked token: one message to the user, nothing lost, and a relink sends what waited.
        dida.revoke(ACCOUNT)
        await chat.notice(dida_texts.NOTICES["broken"])
        await chat.say("记住：在学钢琴")  # already known: merges, no new card
        assert "授权失效" in await chat.say("/dida_status")
        assert (await chat.say(f"/dida_code {dida.grant_code(ACCOUNT)}")).startswith(dida_texts.CODE_NO_STATE[:6])
        await chat.say("/dida_link")
        assert (await chat.say(f"/dida_code {dida.grant_code(ACCOUNT)}")).startswith("已连接滴答清单")
        titles = [t["title"] for t in dida.cards(ACCOUNT)]
        assert len(titles) == len(set(titles)) == 6
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "Traceback" not in output, output
    for token in dida._tokens:
        assert token not in output
    for secret in ("每周一不要打扰我", "猫粮", "下周三去看展", CLIENT_SECRET):
        assert secret not in output, f"{secret} reached the log at INFO"
