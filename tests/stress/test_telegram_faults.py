"""Proof 4, Telegram faults: 429 (retry_after), 403, 5xx and dropped connections on getUpdates and
sendMessage while users talk to the real bot process. No update is lost, no reply is lost or doubled
(a user who blocked the bot cannot get a reply: there the bot must neither crash nor retry forever)."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from bench.botdriver import CountingTelegram
from tests.fakes import FakeLLM
from tests.stress.harness import FULL, BotProcess, TaggedModel, bot_env, record, scale, started, user_line

pytestmark = pytest.mark.skipif(not FULL, reason="long proof: make stress")
FIRST_USER = 600_001
# (method, fault): a status code, or "drop" for a connection closed without an answer.
SCENARIOS: tuple[tuple[str, int | str], ...] = (
    ("getUpdates", 429), ("getUpdates", 500), ("getUpdates", 502), ("getUpdates", "drop"),
    ("sendMessage", 429), ("sendMessage", 500), ("sendMessage", 502), ("sendMessage", "drop"),
    ("sendMessage", 403),
)


class DroppingTelegram(CountingTelegram):
    """Can also close the connection of the next call of a method without answering (a network error)."""

    def __init__(self) -> None:
        super().__init__()
        self.drops: Counter[str] = Counter()

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"].lower()
        if self.drops[method] > 0:
            self.drops[method] -= 1
            await request.read()
            assert request.transport is not None
            request.transport.abort()
            return web.Response(status=499)
        return await super()._handle(request)


async def test_telegram_faults_lose_and_double_nothing(tmp_path: Path) -> None:
    rounds = scale(1, 4)
    results: dict[str, Counter[str]] = {}
    model = TaggedModel(delay=(0.05, 0.2))
    async with DroppingTelegram() as tg, FakeLLM() as llm:
        model.install(llm)
        bot = await BotProcess(bot_env(tg, llm, tmp_path), tmp_path, tg=tg).start()
        uid = FIRST_USER
        try:
            await started(tg, bot)
            for r in range(rounds):
                for method, fault in SCENARIOS:
                    uid += 1
                    tg.push_text(uid, "/start_aiGF")
                    assert await tg.wait_count(uid, 1, 30), "greeting missing"
                    if fault == "drop":
                        tg.drops[method.lower()] += 1
                    else:
                        assert isinstance(fault, int)
                        tg.fail_next(method, status=fault, retry_after=1)
                    tg.push_text(uid, user_line(uid, r))
                    await tg.wait_count(uid, 2, 25)
                    await asyncio.sleep(1.5)  # room for a doubled answer
                    got = len(tg.answers[uid]) - 1
                    outcome = "ok" if got == 1 else "lost" if got == 0 else "doubled"
                    if fault == 403:
                        outcome = "ok" if got == 0 else "doubled" if got > 1 else "delivered to a blocked user"
                    results.setdefault(f"{method} {fault}", Counter())[outcome] += 1
            alive = bot.proc is not None and bot.proc.returncode is None
        finally:
            code, _ = await bot.stop()
    figures = {
        "rounds": rounds, "outcomes": {k: dict(v) for k, v in results.items()},
        "bot_alive_after_faults": alive, "exit_code": code,
    }
    record("telegram_faults", figures)
    failing = {k: dict(v) for k, v in results.items() if set(v) != {"ok"}}
    assert alive and not failing, failing
