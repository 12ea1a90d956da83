"""The plugin's weekly round without AstrBot (the rule itself: tests/test_engine_weekly.py): only opted-in
scopes, only on a local Monday, once a week, a failed send retried, to the address each opted in from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from companion.hosts.astrbot.memory_service import MemoryService
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.rounds import weekly_round
from companion.hosts.astrbot.scopes import Speaker

# Monday 2026-03-02 10:00 in Shanghai is 02:00 UTC.
MONDAY_10 = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = MONDAY_10 - timedelta(days=3)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[MemoryService]:
    opened = await MemoryService.open(tmp_path / "plugin", Options(), None, Clock())
    try:
        yield opened
    finally:
        await opened.close()


async def test_the_weekly_round_sends_opted_in_scopes_on_monday_once(service: MemoryService) -> None:
    ann, ben = Speaker("telegram", "1"), Speaker("telegram", "2")
    await service.add(ann, "喜欢爬山")
    await service.add(ben, "喜欢游泳")
    await service.set_weekly(ann, True, "telegram:FriendMessage:1")
    await service.set_weekly(ben, True, "telegram:FriendMessage:2")
    await service.set_weekly(ben, False, "telegram:FriendMessage:2")
    sent: list[tuple[str, str]] = []
    reachable = False

    async def send(address: str, text: str) -> bool:
        if reachable:
            sent.append((address, text))
        return reachable

    assert await weekly_round(service, MONDAY_10 - timedelta(days=1), send) == 0  # Sunday
    assert await weekly_round(service, MONDAY_10, send) == 0  # unreachable: not recorded
    reachable = True
    assert await weekly_round(service, MONDAY_10 + timedelta(hours=1), send) == 1
    ((address, text),) = sent
    assert address == "telegram:FriendMessage:1" and text.splitlines()[:2] == ["这周我记住了：", "· 喜欢爬山"]
    assert await weekly_round(service, MONDAY_10 + timedelta(hours=2), send) == 0  # once a week
    assert await weekly_round(service, MONDAY_10 + timedelta(days=7), send) == 1
    assert "· （没有新的事情）" in sent[-1][1]  # nothing learned in the second week
