"""The other side of ``python -m bench bot``: fake Telegram and LLM servers and the simulated users.

It runs in its own process (see ``bench.botload``) and imports neither aiogram nor the bot, so it
starts quickly and its CPU time is not the bot's.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.brain import ScriptedModel
from bench.script_zh import FACTS, TURNS
from bench.timing import latency_summary
from companion.chat import texts
from tests.fakes import FakeLLM, FakeTelegram

FIRST_USER = 100_001
FAILURES = {texts.LLM_DOWN: "llm down", texts.INTERNAL_ERROR: "internal error", texts.NOT_STARTED: "not started"}


@dataclass(frozen=True, slots=True)
class BotConfig:
    users: int = 1000
    messages: int = 20
    answer_timeout: float = 120.0
    grace: float = 1.0  # wait this long after the last answer for answers that should not exist


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CountingTelegram(FakeTelegram):
    """Records every answer per chat with its arrival time and wakes the user waiting for it
    (FakeTelegram's own waiters rescan all messages on every send: quadratic at this scale)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[int, list[tuple[float, str]]] = defaultdict(list)
        self._waiting: dict[int, tuple[int, asyncio.Future[None]]] = {}

    async def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        result = await super()._send_message(params)
        chat = int(params["chat_id"])
        self.answers[chat].append((time.perf_counter(), str(params.get("text"))))
        waiter = self._waiting.get(chat)
        if waiter is not None and len(self.answers[chat]) >= waiter[0] and not waiter[1].done():
            waiter[1].set_result(None)
        return result

    async def wait_count(self, chat: int, count: int, timeout: float) -> bool:
        if len(self.answers[chat]) >= count:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[chat] = (count, future)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiting.pop(chat, None)


async def _user(tg: CountingTelegram, uid: int, config: BotConfig, latencies: list[float]) -> int:
    """One closed-loop user; returns how many of its messages got no answer in time."""
    missing = 0
    for n in range(config.messages):
        sent_at = time.perf_counter()
        tg.push_text(uid, TURNS[(uid * 7 + n) % len(TURNS)])
        if await tg.wait_count(uid, n + 2, config.answer_timeout):  # +1 for the greeting
            latencies.append((tg.answers[uid][n + 1][0] - sent_at) * 1000)
        else:
            missing += 1
    return missing


async def _load(tg: CountingTelegram, config: BotConfig) -> dict[str, Any]:
    users = range(FIRST_USER, FIRST_USER + config.users)
    started = time.perf_counter()
    for uid in users:
        tg.push_text(uid, "/start_aiGF")
    greeted = await asyncio.gather(*(tg.wait_count(uid, 1, config.answer_timeout) for uid in users))
    start_s = time.perf_counter() - started
    latencies: list[float] = []
    started = time.perf_counter()
    missing = await asyncio.gather(*(_user(tg, uid, config, latencies) for uid in users))
    last = max((answers[-1][0] for answers in tg.answers.values() if answers), default=started)
    seconds = last - started
    await asyncio.sleep(config.grace)
    counts = [len(tg.answers[uid]) for uid in users]
    failures: dict[str, int] = defaultdict(int)
    for uid in users:
        for _, text in tg.answers[uid][1:]:
            if text in FAILURES:
                failures[FAILURES[text]] += 1
    total = config.users * config.messages
    return {
        "messages": total, "answered": len(latencies), "missing": sum(missing),
        "users_not_greeted": greeted.count(False),
        "exactly_one_answer_each": all(c == config.messages + 1 for c in counts) and not failures,
        "users_with_extra_answers": sum(c > config.messages + 1 for c in counts),
        "failed_answers": dict(failures), "seconds": round(seconds, 3),
        "messages_per_s": round(len(latencies) / seconds, 1) if seconds > 0 else 0.0,
        "latency_ms": latency_summary(latencies), "start_phase_s": round(start_s, 3),
    }


async def _drive(conn: Connection, config: BotConfig) -> None:
    async with CountingTelegram() as tg, FakeLLM() as llm:
        model = ScriptedModel(FACTS)
        model.install(llm)
        conn.send({"token": tg.token, "telegram": tg.base_url, "llm": llm.base_url})
        await asyncio.to_thread(conn.recv)  # the bot is polling
        cpu = cpu_seconds()
        result = await _load(tg, config)
        result["driver_cpu_s"] = round(cpu_seconds() - cpu, 2)
        result["llm_requests"] = dict(model.counts)
        result["telegram_calls"] = dict(Counter(name for name, _ in tg.calls))
        conn.send(result)
        await asyncio.to_thread(conn.recv)  # keep serving until the bot has drained and stopped
        result = {"llm_requests_final": dict(model.counts)}
        conn.send(result)


def driver_main(conn: Connection, config: BotConfig) -> None:
    asyncio.run(_drive(conn, config))


async def _serve_only(conn: Connection) -> None:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        ScriptedModel(FACTS).install(llm)
        conn.send({"token": tg.token, "telegram": tg.base_url, "llm": llm.base_url})
        await asyncio.to_thread(conn.recv)


def serve_main(conn: Connection) -> None:
    """Only the fake servers, for measuring the bot's outgoing calls one by one (``bench.botparts``)."""
    asyncio.run(_serve_only(conn))
