"""The Dida365 kanban's cost: Open API requests per user per poll and per change, a full first push and
poll round against the rate limit, and whether the sync adds to a reply's latency.

Measured with the real sync (``companion.kanban``) on a real engine and SQLite store against the fake
Dida365 (tests/fakes/dida.py) on this machine: request counts are exact; times are this machine's own
work plus the fake's, so the projection to the real service takes its latency (``--latency-ms``) and its
limit (~100 requests a minute per token, paced to 80 by the client) as inputs.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from companion.config.settings import Settings
from companion.core.models import MemoryDraft, MemoryType, Scope, Tier, Validity
from companion.kanban.card_records import TokenBox
from companion.kanban.dida_api import DidaClient
from companion.kanban.sync import DidaConfig, KanbanSync
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.factory import open_store, sqlite_url
from memory import MemoryEngine
from tests.fakes.dida import CLIENT_ID, CLIENT_SECRET, FakeDida

TOPICS = ("跑步", "猫", "火锅", "考试", "加班", "钢琴", "旅行", "电影", "咖啡", "搬家", "面试", "牙医", "朋友",
          "妈妈", "篮球", "写代码", "看书", "做饭", "养花", "游泳")
PACED_PER_MINUTE = 80


@dataclass(frozen=True)
class DidaBenchConfig:
    users: int = 20  # measured users (each linked, first push, polls)
    memories: int = 200
    project_users: int = 1000  # the projection's users
    latency_ms: float = 150.0  # the real service's assumed round trip per request
    concurrency: int = 8  # users synced at once by the worker
    saves: int = 50  # replies' saves timed with and without a sync running beside them
    bulk_cards: int = 300  # cards a user adds at once, read in by one round


@contextmanager
def fake_in_thread() -> Iterator[FakeDida]:
    """The fake Dida365 on its own event loop in a thread, so its work is not counted in the bot's loop (a real
    service's is not); the bot's side calls it over HTTP as it would the real one."""
    fake = FakeDida(per_minute=10**9)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(fake.start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="fake-dida", daemon=True)
    thread.start()
    started.wait(30)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def drafts(n: int, rng: random.Random, user: int) -> list[MemoryDraft]:
    tiers_ = (Tier.SHORT, Tier.MEDIUM, Tier.LONG)
    out = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        tier = tiers_[i % 3]
        out.append(MemoryDraft(event=f"第{i}件事：用户{user}说{topic}相关的安排{rng.randrange(10**6)}号",
                               keywords=[topic], importance=float(rng.randrange(20, 95)), tier=tier,
                               type=MemoryType.FACT, validity=Validity.PERMANENT if tier is Tier.LONG
                               else Validity.DAYS_30))
    return out


async def run_dida(config: DidaBenchConfig) -> dict[str, Any]:
    rng = random.Random(7)
    now = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, data_dir=Path(tmp))  # type: ignore[call-arg]
        store = await open_store(sqlite_url(Path(tmp) / "dida.sqlite3"))
        keywords = KeywordExtractor()
        keywords.load()
        engine = await engine_on(store, settings, keywords)
        with fake_in_thread() as fake:
            client = DidaClient(fake.base_url, fake.base_url, per_minute=10**9)
            sync = KanbanSync(client, engine.kanban, engine, engine.kanban, TokenBox(Fernet.generate_key().decode()),
                              DidaConfig(CLIENT_ID, CLIENT_SECRET, "https://x/cb", settings.tz),
                              lambda scope, ids: engine.forget(scope, ids))
            try:
                report = await _measure(config, rng, now, engine, sync, fake, client)
            finally:
                await client.close()
        await engine.close()
        await store.close()
    report["projection"] = project(config, report)
    return report


async def _measure(config: DidaBenchConfig, rng: random.Random, now: datetime, engine: MemoryEngine,
                   sync: KanbanSync, fake: FakeDida, client: DidaClient) -> dict[str, Any]:
    users = [9000 + n for n in range(config.users)]
    for user in users:
        await engine.remember(Scope(user), drafts(config.memories, rng, user), now, embed=False)

    async def counted(coro: Any) -> tuple[int, float]:
        before, started = client.requests, time.perf_counter()
        await coro
        return client.requests - before, time.perf_counter() - started

    first = [await counted(sync.link(u, fake.grant_code(f"a{u}"), now)) for u in users]
    now += timedelta(minutes=10)
    polls = [await counted(sync.sync(u, now)) for u in users]
    change = []
    for user in users:
        await engine.save(Scope(user), MemoryDraft(event=f"用户{user}新说的一件事", keywords=["新"], importance=60,
                                                  tier=Tier.MEDIUM, type=MemoryType.FACT), now)
        change.append(await counted(sync.sync(user, now)))
    drags = []
    for user in users:
        card = fake.cards(f"a{user}")[0]
        fake.user_move(f"a{user}", card["id"], "长期记忆" if fake.column_name(f"a{user}", card) != "长期记忆"
                       else "短期记忆")
        drags.append(await counted(sync.sync(user, now)))
    round_started = time.perf_counter()
    gate = asyncio.Semaphore(config.concurrency)

    async def one(user: int) -> None:
        async with gate:
            await sync.sync(user, now)

    await asyncio.gather(*(one(u) for u in users))
    poll_round = time.perf_counter() - round_started
    reply = await reply_latency(config, engine, sync, fake, rng, now)
    pulled = await bulk_pull(config, engine, sync, fake, now)
    return {
        "users": config.users, "memories_per_user": config.memories,
        "first_push_requests_per_user": statistics.median(n for n, _ in first),
        "first_push_s_per_user_here": round(statistics.median(t for _, t in first), 3),
        "poll_requests_per_user": statistics.median(n for n, _ in polls),
        "poll_ms_per_user_here": round(1000 * statistics.median(t for _, t in polls), 2),
        "change_requests_per_user": statistics.median(n for n, _ in change),
        "user_drag_requests": statistics.median(n for n, _ in drags),
        "poll_round_s_here": round(poll_round, 3),
        "cards_per_account": statistics.median(len(fake.cards(f"a{u}")) for u in users),
        "reply_save_ms": reply,
        "bulk_pull": pulled,
    }


async def bulk_pull(config: DidaBenchConfig, engine: MemoryEngine, sync: KanbanSync, fake: FakeDida,
                    now: datetime) -> dict[str, float]:
    """A user adds ``bulk_cards`` cards on the board at once (the adversarial run's 300): the round that reads
    them in, and that same user's saves (a reply's write, which takes the scope's lock too) while it runs."""
    user = 6000
    await sync.link(user, fake.grant_code("bulk"), now)
    for i in range(config.bulk_cards):
        fake.user_create("bulk", "长期记忆", f"看板上一次加的第{i}张卡片：{TOPICS[i % len(TOPICS)]}的第{i}个计划")
    later = now + timedelta(minutes=11)
    started = time.perf_counter()
    pulling = asyncio.create_task(sync.sync(user, later))
    waits: list[float] = []
    while not pulling.done():
        began = time.perf_counter()
        await engine.save(Scope(user), MemoryDraft(event=f"聊天里记下的第{len(waits)}件事", keywords=["聊天"],
                                                   importance=50, type=MemoryType.FACT), later)
        waits.append(1000 * (time.perf_counter() - began))
        await asyncio.sleep(0.05)
    await pulling
    return {"cards": config.bulk_cards, "round_s": round(time.perf_counter() - started, 2),
            "memories_after": len(await engine.memories(Scope(user))),
            "save_p50_ms": round(statistics.median(waits), 2) if waits else 0.0,
            "save_max_ms": round(max(waits), 2) if waits else 0.0, "saves": len(waits)}


async def reply_latency(config: DidaBenchConfig, engine: MemoryEngine, sync: KanbanSync, fake: FakeDida,
                        rng: random.Random, now: datetime) -> dict[str, float]:
    """Median time of a user's save (what a reply's write costs) alone, and while another user's first
    push of ``memories`` cards runs in the same event loop, side by side in alternating rounds."""
    alone: list[float] = []
    beside: list[float] = []
    busy = 8000
    await engine.remember(Scope(busy), drafts(config.memories, rng, busy), now, embed=False)
    for round_ in range(2):
        for kind in ("alone", "beside"):
            pushing = None
            if kind == "beside":
                await sync.unlink(busy, delete_project=False)
                pushing = asyncio.create_task(sync.link(busy, fake.grant_code(f"busy{round_}"), now))
                await asyncio.sleep(0)
            samples = alone if kind == "alone" else beside
            for i in range(config.saves // 2):
                started = time.perf_counter()
                await engine.save(Scope(7000), MemoryDraft(event=f"回复时记下的第{round_}-{kind}-{i}件事",
                                                           keywords=["回复"], importance=50,
                                                           type=MemoryType.FACT), now)
                samples.append(1000 * (time.perf_counter() - started))
                await asyncio.sleep(0)
            if pushing is not None:
                await pushing
    return {"alone_p50": round(statistics.median(alone), 3), "beside_push_p50": round(statistics.median(beside), 3)}


def project(config: DidaBenchConfig, measured: dict[str, Any]) -> dict[str, Any]:
    """1,000 users (or ``project_users``) against the real service: requests, and the time a full first
    push and a poll round take when each request costs ``latency_ms`` and each token is paced to 80 a
    minute, with ``concurrency`` users at once."""
    users = config.project_users
    first = float(measured["first_push_requests_per_user"])
    poll = float(measured["poll_requests_per_user"])
    per_user_first_min = max(first * config.latency_ms / 60000, math.ceil(first / PACED_PER_MINUTE) - 1
                             + (first % PACED_PER_MINUTE or PACED_PER_MINUTE) * config.latency_ms / 60000)
    waves = math.ceil(users / config.concurrency)
    return {
        "users": users,
        "first_push_requests": int(users * first),
        "first_push_minutes_per_user": round(per_user_first_min, 2),
        "first_push_hours_all_users": round(waves * per_user_first_min / 60, 2),
        "poll_round_requests": int(users * poll),
        "poll_round_minutes": round(waves * poll * config.latency_ms / 60000, 2),
        "poll_requests_per_user_per_minute": round(poll / 10, 2),
        "fits_rate_limit_per_token": poll / 10 < PACED_PER_MINUTE,
    }


def format_dida(report: dict[str, Any]) -> str:
    p = report["projection"]
    bulk = report["bulk_pull"]
    lines = [
        f"{report['users']} users x {report['memories_per_user']} memories, measured against the fake:",
        f"  first push: {report['first_push_requests_per_user']} requests/user "
        f"({report['first_push_s_per_user_here']} s/user here)",
        f"  poll with nothing changed: {report['poll_requests_per_user']} requests/user "
        f"({report['poll_ms_per_user_here']} ms/user here); a round of all users: {report['poll_round_s_here']} s",
        f"  one change in Telegram: {report['change_requests_per_user']} requests; one drag in the app: "
        f"{report['user_drag_requests']} requests",
        f"  a save's latency: {report['reply_save_ms']['alone_p50']} ms alone, "
        f"{report['reply_save_ms']['beside_push_p50']} ms beside a 200-card push (p50)",
        f"  {bulk['cards']} cards added at once: read in by one round of {bulk['round_s']} s "
        f"({bulk['memories_after']} memories after it, the capacity); that user's saves meanwhile "
        f"{bulk['save_p50_ms']} ms p50, {bulk['save_max_ms']} ms max ({bulk['saves']} saves)",
        f"projection, {p['users']} users:",
        f"  first push: {p['first_push_requests']} requests, {p['first_push_minutes_per_user']} min per user "
        f"paced to {PACED_PER_MINUTE}/min, {p['first_push_hours_all_users']} h for all",
        f"  poll round: {p['poll_round_requests']} requests, {p['poll_round_minutes']} min "
        f"({p['poll_requests_per_user_per_minute']} requests/user/min at a 10-minute poll)",
    ]
    return "\n".join(lines)


