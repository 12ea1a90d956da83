"""Follow-ups in the AstrBot plugin without AstrBot: the same engine rules as the Telegram bot's. A cue at a
private conversation's start, never in a group, never for what the user stopped; a message written first
by AstrBot's model to the private chat the user last wrote from, only where the platform lets the bot write
first, once, recorded before it is sent, with the way to stop it; none on a day the user wrote."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from companion.core.errors import LLMUnavailableError
from companion.hosts.astrbot import replies as texts
from companion.hosts.astrbot.memory_service import MemoryService
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.rounds import followup_round
from companion.hosts.astrbot.scopes import Speaker
from companion.hosts.astrbot.tool_calls import call

SHANGHAI = ZoneInfo("Asia/Shanghai")
ANN = Speaker("telegram", "1")
ADDRESS = "telegram:FriendMessage:1"
ASKED = "杭州回来啦？都顺利吗"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)  # Friday 10:00 in Shanghai

    def __call__(self) -> datetime:
        return self.now

    def local(self, day: int, hour: int) -> datetime:
        self.now = datetime(2026, 12, day, hour, 0, tzinfo=SHANGHAI).astimezone(UTC)
        return self.now


class Outbox:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.prompts: list[str] = []
        self.reachable = True
        self.fail = False

    async def send(self, address: str, text: str) -> bool:
        self.sent.append((address, text))
        return True

    def can(self, address: str) -> bool:
        return self.reachable

    async def write(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if self.fail:
            raise LLMUnavailableError("followup: down")
        return ASKED


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def service(tmp_path: Path, clock: Clock) -> AsyncIterator[MemoryService]:
    opened = await MemoryService.open(tmp_path / "plugin", Options(), None, clock)
    try:
        yield opened
    finally:
        await opened.close()


async def told_trip(service: MemoryService, speaker: Speaker = ANN) -> int:
    await service.heard(speaker, ADDRESS)
    said = await call(service.tools, speaker.scope, "companion_memory_add",  # the model's tool, as AstrBot calls it
                      {"content": "下周三去杭州出差三天", "importance": 70, "type": "event", "date": "2026-12-09",
                       "end_date": "2026-12-11"})
    handle: int = json.loads(said.removeprefix(texts.BEGIN).removesuffix(texts.END))["saved"]["handle"]
    return handle


async def test_written_first_once_where_the_platform_lets_it(service: MemoryService, clock: Clock) -> None:
    await told_trip(service)
    box = Outbox()

    async def round_at(day: int, hour: int) -> int:
        return await followup_round(service, clock.local(day, hour), box.send, box.can, box.write)

    assert await round_at(11, 12) == 0  # the trip's last day
    box.reachable = False
    assert await round_at(12, 10) == 0 and box.prompts == []  # the platform cannot start a message
    box.reachable, box.fail = True, True
    assert await round_at(12, 11) == 0 and box.sent == []  # the model is down: nothing recorded
    box.fail = False
    assert await round_at(12, 12) == 1
    [(address, text)] = box.sent
    assert address == ADDRESS and text == ASKED + texts.FOLLOWUP_HOW_TO_STOP
    assert "下周三去杭州出差三天" in box.prompts[-1] or "12月9日" in box.prompts[-1]
    assert await round_at(12, 18) == 0 and await round_at(13, 10) == 0  # once
    [thread] = await service.engine.followups.threads(ANN.scope)
    assert thread.pushed_at == datetime(2026, 12, 12, 12, tzinfo=SHANGHAI)


async def test_not_on_a_day_the_user_wrote_nor_when_switched_off(service: MemoryService, clock: Clock) -> None:
    await told_trip(service)
    box = Outbox()
    clock.local(12, 8)
    await service.heard(ANN, ADDRESS)
    assert await followup_round(service, clock.local(12, 11), box.send, box.can, box.write) == 0
    await service.engine.followups.switch(ANN.scope, False)
    assert await followup_round(service, clock.local(13, 11), box.send, box.can, box.write) == 0
    await service.engine.followups.switch(ANN.scope, True)
    assert await followup_round(service, clock.local(13, 12), box.send, box.can, box.write) == 1


async def test_the_plugins_switch(tmp_path: Path, clock: Clock) -> None:
    service = await MemoryService.open(tmp_path / "off", Options(followups=False), None, clock)
    try:
        await told_trip(service)
        assert await followup_round(service, clock.local(12, 11), Outbox().send, Outbox().can, Outbox().write) == 0
    finally:
        await service.close()


async def test_a_cue_at_a_private_conversations_start_only(service: MemoryService, clock: Clock) -> None:
    handle = await told_trip(service)
    clock.local(12, 9)
    first = await service.reference(ANN, "早上好")
    assert first is not None and "应该已经结束了" in first and "这是提示" in first
    await service.heard(ANN, ADDRESS)
    clock.local(12, 10)
    assert "应该已经结束了" not in str(await service.reference(ANN, "今天想睡懒觉"))  # the same conversation
    group = Speaker("telegram", "1", "g1")
    await told_trip(service, group)
    assert "应该已经结束了" not in str(await service.reference(group, "早上好"))  # never in a group
    await service.engine.followups.stop(ANN.scope, handle, clock())
    clock.local(13, 9)
    assert "应该已经结束了" not in str(await service.reference(ANN, "早上好"))  # "别再提"


def test_the_hours_option_reads_like_the_bots_setting() -> None:
    assert Options.read({"followup_hours": "9-22"}).hours == (9, 22)
    assert Options.read({"followup_hours": "22-9"}).hours == (10, 21)  # nonsense: the default
    assert Options.read({}).followups and not Options.read({"followups": False}).followups
