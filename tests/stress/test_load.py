"""Proof 1, load: the real bot process, many simulated users talking at once (each a closed loop: a
message, then the next once it is answered), a fake LLM answering after 50-500 ms. Every message is
answered exactly once, each memory lands in its author's table only, the database stays intact."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from bench.botdriver import FAILURES, CountingTelegram
from tests.fakes import FakeLLM
from tests.stress.harness import (
    TAG,
    BotProcess,
    TaggedModel,
    bot_env,
    db_path,
    integrity,
    memory_tables,
    percentile,
    queued_texts,
    record,
    scale,
    started,
    user_line,
)

FIRST_USER = 300_001


async def _user(tg: CountingTelegram, uid: int, messages: int, latencies: list[float], until: float) -> int:
    """One closed-loop user; stops sending at ``until`` (so a slow machine still yields figures)."""
    missing = 0
    for n in range(messages):
        if time.perf_counter() > until:
            break
        sent_at = time.perf_counter()
        tg.push_text(uid, user_line(uid, n))
        if await tg.wait_count(uid, n + 2, 120):  # +1: the greeting
            latencies.append((tg.answers[uid][n + 1][0] - sent_at) * 1000)
        else:
            missing += 1
    return missing


async def test_many_users_every_message_answered_once_in_own_scope(tmp_path: Path) -> None:
    users, messages = scale(12, 1000), scale(6, 20)
    model = TaggedModel()
    async with CountingTelegram() as tg, FakeLLM() as llm:
        model.install(llm)
        bot = await BotProcess(bot_env(tg, llm, tmp_path, LLM_TIMEOUT_SECONDS="20"), tmp_path, tg=tg).start()
        try:
            await started(tg, bot)
            ids = range(FIRST_USER, FIRST_USER + users)
            for uid in ids:
                tg.push_text(uid, "/start_aiGF")
            greeted = await asyncio.gather(*(tg.wait_count(uid, 1, 120) for uid in ids))
            assert all(greeted), f"{greeted.count(False)} users not greeted"
            latencies: list[float] = []
            begin = time.perf_counter()
            until = begin + float(os.environ.get("STRESS_LOAD_DEADLINE_S", "3600"))
            missing = sum(await asyncio.gather(*(_user(tg, uid, messages, latencies, until) for uid in ids)))
            seconds = time.perf_counter() - begin
            await asyncio.sleep(1.0)  # answers that should not exist get a chance to show up
        finally:
            code, stop_s = await bot.stop()
    doubled = sum(len(tg.answers[uid]) > messages + 1 for uid in ids)
    failed = sum(text in FAILURES for uid in ids for _, text in tg.answers[uid][1:])
    tables = memory_tables(db_path(tmp_path))
    stray = [(key, event) for key, events in tables.items() for event in events
             for uid, _ in TAG.findall(event) if key != f"u{uid}"]
    stored = sum(len(events) for events in tables.values())
    # A stop abandons extractions still waiting after STOP_TIMEOUT_SECONDS: their turns stay queued.
    kept = {f"{u}-{n}" for events in tables.values() for e in events for u, n in TAG.findall(e)}
    queued = {f"{u}-{n}" for text in queued_texts(db_path(tmp_path)) for u, n in TAG.findall(text)}
    said = {f"{uid}-{n}" for uid in ids for n in range(messages)}
    check = integrity(db_path(tmp_path))
    figures = {
        "users": users, "messages_per_user": messages, "messages": users * messages,
        "messages_sent": len(latencies) + missing, "answered": len(latencies),
        "missing": missing, "users_with_extra_answers": doubled, "failure_answers": failed,
        "seconds": round(seconds, 1), "messages_per_s": round(len(latencies) / seconds, 1),
        "latency_ms": {"p50": percentile(latencies, 0.5), "p95": percentile(latencies, 0.95),
                       "p99": percentile(latencies, 0.99), "max": percentile(latencies, 1.0)},
        "llm_calls": dict(model.calls), "memories_stored": stored, "memories_in_wrong_scope": len(stray),
        "turns_still_queued_at_stop": len(queued - kept),
        "said_but_neither_stored_nor_queued": len(said - kept - queued),
        "integrity_check": check, "exit_code": code, "stop_seconds": round(stop_s, 1),
    }
    record("load", figures)
    assert missing == 0 and doubled == 0 and failed == 0, figures
    assert figures["messages_sent"] == users * messages, "the run hit STRESS_LOAD_DEADLINE_S before the end"
    assert not stray, stray[:5]
    assert stored > 0, "extraction never stored anything"
    assert not said - kept - queued, sorted(said - kept - queued)[:5]
    assert check == "ok"
    assert code == 0, bot.output[-3000:]
