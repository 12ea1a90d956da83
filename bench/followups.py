"""``python -m bench followups``: the follow-up round over many users.

Builds a database of ``users`` users with ``per_user`` memories each (a share of them dated events and
birthdays, spread over the weeks around the measured day), then times, side by side:

- the first catch-up, which derives every thread from every memory (once per database: the upgrade);
- a round's work before its model calls (``engine.followups.to_write``: the journal since the last round, the
  threads that ended, one indexed read of what is due, the due memories read back and each user's gate
  checked), after a few users wrote;
- the plain way, a scan per user (each user's memories read and the rule applied), as the review round does.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bench import synth
from bench.server import server_schema
from bench.timing import machine, peak_rss_mb, progress
from companion.config.settings import Settings
from companion.core import followup_rules as followups
from companion.core.models import MemoryDraft, Scope, When
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.factory import open_store
from memory import MemoryEngine

TZ = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 14, 2, 30, tzinfo=UTC)  # 10:30 local: within the hours
TODAY = NOW.astimezone(TZ).date()
TARGET_S = 1.0


@dataclass(frozen=True, slots=True)
class FollowUpBenchConfig:
    users: int = 10_000
    per_user: int = 200
    dated_share: float = 0.05  # of the memories: told events with a date (a few of them birthdays)
    rounds: int = 7
    writers: int = 50  # users who write a dated memory between two rounds
    seed: int = 11
    database_url: str = ""


def dated(r: random.Random, draft: MemoryDraft) -> MemoryDraft:
    """The draft as a told event around ``TODAY`` (six weeks either side), one in ten a yearly date."""
    if r.random() < 0.1:
        return replace(draft, happens=When(date(1990 + r.randint(0, 20), r.randint(1, 12), r.randint(1, 28)),
                                           yearly=True))
    start = TODAY + timedelta(days=r.randint(-42, 42))
    return replace(draft, happens=When(start, start + timedelta(days=r.choice((0, 0, 1, 2)))))


def drafts(r: random.Random, count: int, share: float) -> list[MemoryDraft]:
    return [dated(r, d) if r.random() < share else d for d in synth.memories(r, count, NOW - timedelta(days=1))]


async def run_followups(config: FollowUpBenchConfig) -> dict[str, Any]:
    if config.database_url:
        async with server_schema(config.database_url, "bench_followups") as url:
            return await _run(replace(config, database_url=url))
    return await _run(config)


async def _run(config: FollowUpBenchConfig) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-followups-") as tmp:
        root = Path(tmp)
        settings = Settings(_env_file=None, data_dir=root / "data", backup_dir=root / "backups",  # type: ignore[call-arg]
                            database_url=config.database_url, memory_capacity=max(config.per_user * 2, 200),
                            embeddings="off")  # vectors play no part in follow-ups: keywords build fast
        store = await open_store(settings.database)
        try:
            engine = await engine_on(store, settings, KeywordExtractor())
            return await _measure(engine, config)
        finally:
            await store.close()


async def _measure(engine: MemoryEngine, config: FollowUpBenchConfig) -> dict[str, Any]:
    r = random.Random(config.seed)
    report: dict[str, Any] = {"config": asdict(config), "machine": machine(), "target_s": TARGET_S}
    start = time.perf_counter()
    for number in range(1, config.users + 1):
        scope = Scope(number)
        await engine.remember(scope, drafts(r, config.per_user, config.dated_share), NOW - timedelta(days=1))
        await engine.set_active(scope, True, NOW)
        progress("users loaded", number, config.users)
    report["build_s"] = round(time.perf_counter() - start, 1)

    start = time.perf_counter()
    await engine.followups.catch_up(NOW)  # the first time: every memory
    report["first_catch_up_s"] = round(time.perf_counter() - start, 2)

    rounds: list[float] = []
    due_counts: list[int] = []
    now = NOW
    for number in range(config.rounds):
        for _ in range(config.writers):  # what users told since the last round
            scope = Scope(r.randint(1, config.users))
            await engine.remember(scope, [dated(r, synth.memory(r, now))], now)
        now += timedelta(minutes=30)
        start = time.perf_counter()
        due = await engine.followups.to_write(now, (10, 21))
        rounds.append(time.perf_counter() - start)
        due_counts.append(len(due))
        progress("rounds", number + 1, config.rounds)
    report["round_s"] = {"median": round(statistics.median(rounds), 4), "max": round(max(rounds), 4),
                         "runs": [round(x, 4) for x in rounds]}
    report["due_per_round"] = due_counts

    # The plain way: every user's memories read and the rule applied (what a per-user round costs).
    start = time.perf_counter()
    plain_due = 0
    for number in range(1, config.users + 1):
        memories = await engine.memories(Scope(number))
        plain_due += len(followups.days_of(memories, TODAY)) + len(followups.open_threads(memories, TODAY, TZ))
        progress("plain scan", number, config.users)
    report["plain_scan_s"] = round(time.perf_counter() - start, 2)
    report["plain_due"] = plain_due
    report["ratio_plain_to_round"] = round(report["plain_scan_s"] / report["round_s"]["median"], 1)
    report["rss_mb"] = peak_rss_mb()
    report["met"] = report["round_s"]["median"] <= TARGET_S
    return report


def format_followups(report: dict[str, Any]) -> str:
    c = report["config"]
    rounds = report["round_s"]
    return "\n".join([
        f"follow-ups: {c['users']:,} users x {c['per_user']} memories ({c['dated_share']:.0%} dated), "
        f"{'PostgreSQL' if c['database_url'] else 'SQLite'}",
        f"  build {report['build_s']} s; first catch-up (every memory) {report['first_catch_up_s']} s",
        f"  a round before its model calls: median {rounds['median'] * 1000:.1f} ms, max {rounds['max'] * 1000:.1f} ms "
        f"({c['writers']} users wrote between rounds; {report['due_per_round'][-1]} to write) "
        f"target <= {report['target_s']} s: {'met' if report['met'] else 'MISSED'}",
        f"  plain scan per user: {report['plain_scan_s']} s ({report['ratio_plain_to_round']}x the round); "
        f"peak RSS {report['rss_mb']} MB",
    ])
