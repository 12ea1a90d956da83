"""Throughput of ``python bot.py`` on PostgreSQL with one worker process and with two (``WORKERS``), behind
the webhook of the fake Telegram with the fake LLM of the process proofs (replies after 20-200 ms), runs
alternating so the machine's load falls on both alike. Every message must be answered once, in order.

``python -m bench workers [--users 200] [--messages 20] [--pairs 2] [--database-url URL]``
(Redis: ``TEST_REDIS_URL``, default 127.0.0.1:6379, under a key prefix of its own, deleted after)
prints one JSON object per run (with the bot's CPU per message, its worker processes included) and
their medians. Linux only (the CPU is read from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.server import server_schema
from tests.fakes import FakeLLM, FakeTelegram
from tests.redistest import redis_keys
from tests.stress.harness import BotProcess
from tests.test_workers_process import check, env_for, greet, install_tagged_model, talk, until_answered


async def one_run(workers: int, users: int, messages: int, database: str) -> dict[str, Any]:
    first = 900_001
    chats = range(first, first + users)
    async with FakeTelegram() as tg, FakeLLM() as llm, server_schema(database, "bw") as url, redis_keys() as prefix:
        install_tagged_model(llm)
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            env = env_for(tg, llm, root, prefix, DATABASE_URL=url, WORKERS=str(workers))
            bot = await BotProcess(env, root, tg=tg).start()
            try:
                await tg.wait_for_call("setWebhook", timeout=120)
                await greet(tg, chats)
                cpu_before = cpu_seconds(bot.pid)
                begin = time.perf_counter()
                await talk(tg, chats, messages, seed=5)
                await until_answered(tg, chats, messages)
                seconds = time.perf_counter() - begin - 1.0  # until_answered's last second looks for extras
                cpu = cpu_seconds(bot.pid) - cpu_before
            finally:
                await bot.stop()
            check(tg, chats, messages)
    return {"workers": workers, "users": users, "messages_per_user": messages, "seconds": round(seconds, 1),
            "messages_per_s": round(users * messages / seconds, 1),
            "bot_cpu_ms_per_message": round(1000 * cpu / (users * messages), 2),
            "llm_calls": {"reply": len(llm.chat_requests()), "other": len(llm.json_requests())}}


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its child processes (the workers ``WORKERS`` starts), from /proc."""
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    total = 0
    for one in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of the line)
    return total / os.sysconf("SC_CLK_TCK")


async def measure(users: int, messages: int, pairs: int, database: str) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for pair in range(pairs):
        for workers in (1, 2) if pair % 2 == 0 else (2, 1):
            run = await one_run(workers, users, messages, database)
            print(json.dumps(run), flush=True)
            runs[workers].append(run)
    return {f"{n}_worker{'s' if n > 1 else ''}": {
        "median_messages_per_s": statistics.median(r["messages_per_s"] for r in found),
        "median_bot_cpu_ms_per_message": statistics.median(r["bot_cpu_ms_per_message"] for r in found)}
        for n, found in runs.items()}


def run_command(args: argparse.Namespace) -> int:
    print(json.dumps(asyncio.run(measure(args.users, args.messages, args.pairs, args.database_url))))
    return 0
