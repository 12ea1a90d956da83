"""A month with the companion, ``python bot.py`` as a real process against the fake Telegram and LLM:
facts told in passing between small talk, one saved explicitly, ``/reset``; then questions that touch
each fact, each of which must reach the reply call the model receives (through recall or the profile).
Weeks later (the stored times moved back, the process restarted, the nightly decay run) the lasting
facts still come back and the week-long trip has faded."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.process import bot_env, run_cli, start_bot, stop_bot
from tests.scripted import ScriptedBrain, model_context
from tests.timed import Person

USER = 5301
STAMP = "[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]Z"  # timeutil's stored form

FACTS = {
    "小李": {"event": "2026-11-25 希望被叫作小李", "keywords": ["小李", "称呼", "名字", "叫我"], "importance": 80,
             "validity": "permanent", "type": "fact"},
    "过敏": {"event": "2026-11-25 对花生过敏", "keywords": ["花生", "过敏", "花生酱", "坚果"], "importance": 90,
             "validity": "permanent", "type": "fact"},
    "出差": {"event": "2026-12-02 去上海出差", "keywords": ["上海", "出差", "行李"], "importance": 70,
             "validity": "7d", "type": "event"},
    "吉他": {"event": "2026-11-25 最近在学吉他", "keywords": ["吉他", "练琴", "乐器"], "importance": 60,
             "validity": "30d", "type": "event"},
}
SMALL_TALK = ["今天天气还不错", "中午随便吃了点面条", "下午开了个很长的会", "晚上想早点睡", "刚刚看了会儿电视",
              "窗外有点吵", "周末还没想好干嘛", "今天走了挺多路"]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


class Chat(Person):
    """One person talking to the bot process, one message at a time."""

    def __init__(self, tg: FakeTelegram, llm: FakeLLM, user: int = USER) -> None:
        super().__init__(tg, llm, user)
        self.small = 0

    async def ask(self, text: str) -> str:
        """A turn to the companion; returns what the model was told besides the conversation."""
        before = len(self.llm.chat_requests())
        await self.say(text)
        requests = await self.llm.wait_for_requests(before + 1, lambda r: not FakeLLM.is_json_mode(r))
        return model_context(requests[-1])

    async def touches(self, expected: dict[str, str], gap: int = 4) -> None:
        """Each turn in order, small talk between: its reply call must carry the memory text named for it."""
        for n, (turn, memory) in enumerate(expected.items()):
            if n:
                await self.chatter(gap)
            assert memory in await self.ask(turn), f"{turn!r} did not bring back {memory!r}"

    async def chatter(self, turns: int) -> None:
        # Between touches: the ~20% recall rate and the 5-turn cooldown leave room for the next one.
        for _ in range(turns):
            await self.say(SMALL_TALK[self.small % len(SMALL_TALK)])
            self.small += 1


def age_database(db: Path, days: int) -> None:
    """Every stored time moved ``days`` back: for the data, that many days have passed."""
    conn = sqlite3.connect(db)
    try:
        tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for column in [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]:
                conn.execute(
                    f'UPDATE "{table}" SET "{column}" = strftime(\'%Y-%m-%dT%H:%M:%SZ\', "{column}", ?) '
                    f'WHERE typeof("{column}") = \'text\' AND "{column}" GLOB ?', (f"-{days} days", STAMP))
        conn.commit()
    finally:
        conn.close()


async def test_a_month_with_the_companion(servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = servers
    brain = ScriptedBrain(facts=FACTS, summaries={"吉他": ("聊到最近在学吉他，手指有点疼", ["吉他", "练琴"])},
                          saves={"朵朵": {"event": "女儿叫朵朵", "keywords": ["朵朵", "女儿", "孩子"], "type": "fact",
                                          "importance": 85, "core": True}})
    brain.install(llm)
    # Regular extraction every 6 turns; the rest of the settings as shipped (recall rate, cooldown, floors).
    env = bot_env(tg, llm, tmp_path, EXTRACT_EVERY_MIN="6", EXTRACT_EVERY_MAX="6")
    chat = Chat(tg, llm)

    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        await chat.say("/start_aiGF")
        # Week one: told in passing, between small talk.
        await chat.chatter(2)
        await chat.say("我叫李明，你叫我小李就好")
        await chat.chatter(3)
        await chat.say("对了，我对花生过敏，一吃就起疹子")  # a health word: learned at once
        await chat.chatter(2)
        await chat.say("下周三要去上海出差，得提前准备")
        await chat.chatter(3)
        await chat.say("记住：我女儿叫朵朵")  # saved explicitly
        await chat.say("最近在学吉他，每天练半小时")
        await chat.chatter(5)  # the regular extraction runs in here
        receipt = await chat.say("/reset")
        # The summary retells the guitar memory learned that day, which keeps its day (shown in front).
        assert re.search(r"刚才聊的我记下了：(11月25日（周三）)?聊到最近在学吉他，手指有点疼$", receipt), receipt

        # Questions that touch each fact, spaced as the recall rate (about one turn in five) allows.
        assert "对花生过敏" in await chat.ask("朋友送了我一罐花生酱，能吃吗")
        await chat.chatter(4)
        assert "去上海出差" in await chat.ask("下周三去上海出差要带什么行李")
        await chat.chatter(4)
        assert "朵朵" in await chat.ask("周末想带朵朵去公园玩")
        await chat.chatter(4)
        assert "在学吉他" in await chat.ask("今天练吉他练得手指好疼")
        await chat.chatter(4)
        assert "小李" in await chat.ask("你还记得该怎么称呼我吗")
    finally:
        output = await stop_bot(proc)
    assert "花生" not in output and "朵朵" not in output, "memory text reached the log above DEBUG"

    code, listing, err = await run_cli(env, tmp_path, "memories", str(USER))
    assert code == 0, err
    assert "希望被叫作小李" in listing and "2026-11-25 希望被叫作小李" not in listing, "a timeless fact got a date"

    # Three weeks pass: the nightly decay runs, the companion is started again.
    age_database(tmp_path / "data" / "memory.sqlite3", 21)
    code, _out, err = await run_cli(env, tmp_path, "decay")
    assert code == 0, err
    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("setMyCommands", timeout=90)
        chat.sent = len(tg.sent_messages(USER))
        await chat.say("/start_aiGF")
        await chat.chatter(1)
        assert "对花生过敏" in await chat.ask("今天同事请吃花生糖，我能吃吗")
        await chat.chatter(4)
        assert "小李" in await chat.ask("你还记得该怎么称呼我吗")
        await chat.chatter(4)
        assert "朵朵" in await chat.ask("朵朵今天在学校得了小红花")
        await chat.chatter(4)
        # The week-long trip is over: it has faded, however the turn touches it.
        assert "去上海出差" not in await chat.ask("上海出差的行李还没收拾完")
    finally:
        await stop_bot(proc)
    code, listing, err = await run_cli(env, tmp_path, "memories", str(USER))
    assert code == 0, err
    assert "对花生过敏" in listing and "去上海出差" not in listing
