"""Proof 3, LLM outage: for a stretch of time (2 minutes under ``make stress``) every model call fails
in turn with HTTP 500, 429 with Retry-After, a timeout, invalid JSON or empty content, while users keep
talking to the real bot process. Every message still gets one friendly answer; the SDK's retries stay
within their count and back off; extraction keeps the turns queued and, after recovery, stores each
thing said exactly once."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import sqlite3
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bench.botdriver import CountingTelegram
from companion.chat import texts
from tests.fakes import FakeLLM
from tests.stress.harness import (
    FULL,
    TAG,
    BotProcess,
    TaggedModel,
    bot_env,
    db_path,
    integrity,
    memory_tables,
    record,
    started,
    user_line,
)

pytestmark = pytest.mark.skipif(not FULL, reason="long proof: make stress")
FIRST_USER = 500_001
FAULTS = ("500", "429", "timeout", "invalid_json", "empty")
MAX_RETRIES = 2
TIMEOUT_S = 1.0
RETRY_AFTER_S = 1
CALL_GAP_S = 5.0


class FlakyLLM(FakeLLM):
    """FakeLLM that, while ``down``, answers each request with the next fault in ``FAULTS``."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        # (time, request digest, fault or "ok", the SDK's count of this request's retries so far)
        self.attempts: list[tuple[float, str, str, int | None]] = []
        self._next = 0

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        digest = hashlib.sha1(raw).hexdigest()
        retry = request.headers.get("x-stainless-retry-count")
        retries = int(retry) if retry is not None and retry.isdigit() else None
        if not self.down:
            self.attempts.append((time.monotonic(), digest, "ok", retries))
            return await super()._completions(request)
        fault = FAULTS[self._next % len(FAULTS)]
        self._next += 1
        self.attempts.append((time.monotonic(), digest, fault, retries))
        body: dict[str, Any] = json.loads(raw)
        if fault == "500":
            return web.json_response({"error": {"message": "down", "type": "server_error"}}, status=500)
        if fault == "429":
            return web.json_response({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                                     headers={"Retry-After": str(RETRY_AFTER_S)})
        if fault == "timeout":
            await asyncio.sleep(TIMEOUT_S + 1.5)
            return web.json_response({"error": {"message": "late"}}, status=500)
        content = "{not json at all" if fault == "invalid_json" else ""
        message = {"role": "assistant", "content": content}
        return web.json_response({
            "id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
        })


def retry_report(attempts: list[tuple[float, str, str, int | None]]) -> dict[str, Any]:
    """Attempts grouped into calls by the SDK's own count of a request's retries (its
    ``x-stainless-retry-count`` header, 0 on a call's first attempt): the same queued turns extracted
    again, or a profile asked for again, send the same body as a new call, however soon. Without the header,
    attempts with the same body less than ``CALL_GAP_S`` apart count as one call (the SDK waits at most
    about a second here: Retry-After 1, or 0.5-1 s of backoff, after a 1 s timeout)."""
    by_body: dict[str, list[tuple[float, str, int | None]]] = defaultdict(list)
    for at, digest, fault, retries in attempts:
        by_body[digest].append((at, fault, retries))
    calls: list[list[tuple[float, str, int | None]]] = []
    for series in by_body.values():
        current = [series[0]]
        for prev, item in itertools.pairwise(series):
            if item[2] == 0 if item[2] is not None else item[0] - prev[0] > CALL_GAP_S:
                calls.append(current)
                current = []
            current.append(item)
        calls.append(current)
    over = [c for c in calls if len(c) > MAX_RETRIES + 1]
    too_many = len(over)
    gaps = [(b[0] - a[0], a[1]) for c in calls for a, b in itertools.pairwise(c)]
    early_after_429 = sum(gap < RETRY_AFTER_S * 0.9 for gap, fault in gaps if fault == "429")
    too_fast = sum(gap < 0.3 for gap, fault in gaps if fault in ("500",))
    return {
        "calls": len(calls), "retries": len(gaps), "calls_over_retry_limit": too_many,
        "retry_gap_s": {"min": round(min((g for g, _ in gaps), default=0), 2),
                        "max": round(max((g for g, _ in gaps), default=0), 2)},
        "retried_before_retry_after": early_after_429, "retried_without_backoff": too_fast,
        "over_limit_examples": [[(round(at - c[0][0], 2), fault, n) for at, fault, n in c] for c in over[:3]],
    }


async def test_llm_outage_every_message_answered_nothing_lost(tmp_path: Path) -> None:
    users, outage_s, every_s = 20, float(os.environ.get("STRESS_OUTAGE_S", "120")), 4.0
    model = TaggedModel(delay=(0.05, 0.2))
    said: list[str] = []
    async with CountingTelegram() as tg, FlakyLLM() as llm:
        model.install(llm)
        env = bot_env(tg, llm, tmp_path, LLM_MAX_RETRIES=str(MAX_RETRIES), LLM_TIMEOUT_SECONDS=str(TIMEOUT_S),
                      EXTRACT_EVERY_MIN="3", EXTRACT_EVERY_MAX="3")
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        sent: Counter[int] = Counter()

        async def talk(uid: int, n: int) -> None:
            tg.push_text(uid, user_line(uid, n))
            said.append(f"{uid}-{n}")
            sent[uid] += 1

        try:
            await started(tg, bot)
            ids = range(FIRST_USER, FIRST_USER + users)
            for uid in ids:
                tg.push_text(uid, "/start_aiGF")
            assert all(await asyncio.gather(*(tg.wait_count(uid, 1, 60) for uid in ids)))
            llm.down = True
            begin = time.monotonic()
            n = 0
            while time.monotonic() - begin < outage_s:
                await asyncio.gather(*(talk(uid, n) for uid in ids))
                n += 1
                await asyncio.sleep(every_s)
            # Every message of the outage is answered (answers may still be on their way).
            await asyncio.gather(*(tg.wait_count(uid, sent[uid] + 1, 60) for uid in ids))
            outage_answers = [text for uid in ids for _, text in tg.answers[uid][1:]]
            llm.down = False
            for k in range(3):  # recovery: a few more turns, which trigger extraction of the queue
                await asyncio.gather(*(talk(uid, n + k) for uid in ids))
                await asyncio.gather(*(tg.wait_count(uid, sent[uid] + 1, 60) for uid in ids))
            await asyncio.sleep(3)
        finally:
            code, _ = await bot.stop()
        # A restart extracts whatever is still queued (catch-up), then stops.
        again = await BotProcess(env, tmp_path, tg=tg).start()
        try:
            await started(tg, again)
            await asyncio.sleep(5)
        finally:
            await again.stop()
    counts = {uid: len(tg.answers[uid]) - 1 for uid in ids}
    unanswered = sum(max(sent[uid] - counts[uid], 0) for uid in ids)
    doubled = sum(max(counts[uid] - sent[uid], 0) for uid in ids)
    unfriendly = [t for t in outage_answers if not t.strip() or "Error" in t or "Traceback" in t]
    stored = Counter(f"{u}-{m}" for key, events in memory_tables(db_path(tmp_path)).items()
                     for event in events for u, m in TAG.findall(event) if key == f"u{u}")
    with sqlite3.connect(db_path(tmp_path)) as conn:
        waiting = " ".join(r[0] for r in conn.execute("SELECT user_text FROM pending_turns"))
    queued = {f"{u}-{m}" for u, m in TAG.findall(waiting)}
    lost = [tag for tag in said if stored[tag] == 0 and tag not in queued]
    duplicated = [tag for tag, c in stored.items() if c > 1]
    figures = {
        "users": users, "outage_s": outage_s, "messages": len(said), "unanswered": unanswered,
        "extra_answers": doubled, "unfriendly_answers": len(unfriendly),
        "apology_answers_during_outage": sum(t == texts.LLM_DOWN for t in outage_answers),
        "faults_served": dict(Counter(f for _, _, f, _ in llm.attempts)), **retry_report(llm.attempts),
        "memories_expected": len(said), "memories_lost": len(lost),
        "turns_still_queued": len(queued), "memories_duplicated": len(duplicated),
        "integrity_check": integrity(db_path(tmp_path)), "exit_code": code,
    }
    record("outage", figures)
    assert unanswered == 0 and doubled == 0 and not unfriendly, figures
    assert figures["calls_over_retry_limit"] == 0 and figures["retried_before_retry_after"] == 0, figures
    assert not lost and not duplicated, (figures, lost[:5], duplicated[:5])
    assert figures["integrity_check"] == "ok"
