"""The memory board's cost: the time the bot takes to answer a board request of a user with ``memories``
memories (its server time: on loopback, the client's wait is the server's work), the bytes it sends (gzip, as
Telegram's web view asks), the poll that finds nothing changed, and the page's own files; beside a plain
baseline, the same user's memories dumped as JSON by the same server with nothing else (no tiers, dates,
follow-up marks or signature check). Real engine, SQLite store, aiohttp server and client on this machine.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from companion.chat.group import Rooms
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.config.settings import Settings
from companion.core.models import MemoryDraft, MemoryType, Scope, Tier, Validity, When
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.factory import open_store, sqlite_url
from handlers.board import Board, Budget
from tests.miniapp import signed_init_data

TOKEN = "123456:bench-board-token"
TOPICS = ("跑步", "猫", "火锅", "考试", "加班", "钢琴", "旅行", "电影", "咖啡", "搬家", "面试", "牙医", "朋友",
          "妈妈", "篮球", "写代码", "看书", "做饭", "养花", "游泳")


@dataclass(frozen=True)
class BoardBenchConfig:
    memories: int = 200  # the measured user's
    other_users: int = 1000  # users beside them in the database (50 memories each)
    rounds: int = 60


async def run_board(config: BoardBenchConfig) -> dict[str, Any]:
    rng = random.Random(11)
    now = datetime.now(UTC)
    user = 424242
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(_env_file=None, data_dir=Path(tmp), webapp_url="https://b.example/board")  # type: ignore[call-arg]
        store = await open_store(sqlite_url(Path(tmp) / "board.sqlite3"))
        keywords = KeywordExtractor()
        keywords.load()
        engine = await engine_on(store, settings, keywords)
        await engine.remember(Scope(user), drafts(config.memories, rng, now), now, embed=False)
        for other in range(config.other_users):
            await engine.remember(Scope(10_000 + other), drafts(50, rng, now), now, embed=False)
        chat = ChatService(engine, None, ChatConfig.from_settings(settings))  # type: ignore[arg-type]

        async def quiet(user_id: int, text: str) -> None:
            return None

        board = Board(settings, TOKEN, chat, Rooms(), quiet, budget=Budget(limit=10**9))
        app = web.Application()
        board.install(app)

        async def plain(request: web.Request) -> web.Response:
            memories = await engine.memories(Scope(user))
            answer = web.json_response([{"id": m.id, "text": m.event, "tier": m.tier.value} for m in memories])
            answer.enable_compression()
            return answer

        app.router.add_get("/plain", plain)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            report = await measure(f"http://127.0.0.1:{port}", user, config)
        finally:
            await runner.cleanup()
            await engine.close()
            await store.close()
    return {"config": asdict(config), **report}


def drafts(n: int, rng: random.Random, now: datetime) -> list[MemoryDraft]:
    tiers = (Tier.SHORT, Tier.MEDIUM, Tier.LONG)
    out = []
    for i in range(n):
        tier = tiers[i % 3]
        dated = When((now + timedelta(days=rng.randrange(1, 60))).date()) if i % 4 == 0 else None
        out.append(MemoryDraft(event=f"第{i}件事：关于{TOPICS[i % len(TOPICS)]}的安排，编号{rng.randrange(10**6)}",
                               keywords=[TOPICS[i % len(TOPICS)]], importance=float(rng.randrange(20, 95)),
                               tier=tier, type=MemoryType.FACT, happens=dated,
                               validity=Validity.PERMANENT if tier is Tier.LONG else Validity.DAYS_30))
    return out


async def measure(base: str, user: int, config: BoardBenchConfig) -> dict[str, Any]:
    auth = {"Authorization": "tma " + signed_init_data(TOKEN, user), "Accept-Encoding": "gzip"}
    timings: dict[str, list[float]] = {"board": [], "unchanged": [], "plain": []}
    sizes: dict[str, int] = {}
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        async def get(name: str, url: str) -> bytes:
            started = time.perf_counter()
            async with http.get(url, headers=auth) as response:
                body = await response.read()
                assert response.status == 200, (url, response.status)
            timings[name].append(1000 * (time.perf_counter() - started))
            sizes[name] = len(body)
            return body

        first = json.loads(gzip.decompress(await get("board", f"{base}/board/api/board")))
        version = first["version"]
        for _ in range(config.rounds):  # side by side, in turn
            await get("board", f"{base}/board/api/board")
            await get("unchanged", f"{base}/board/api/board?since={version}")
            await get("plain", f"{base}/plain")
        page = 0
        for name in ("", "board.js", "board.css"):
            async with http.get(f"{base}/board/{name}", headers={"Accept-Encoding": "gzip"}) as response:
                page += len(await response.read())
    return {
        "cards": len(first["cards"]),
        "board_ms_p50": round(statistics.median(timings["board"]), 2),
        "board_ms_p95": round(sorted(timings["board"])[int(0.95 * len(timings["board"])) - 1], 2),
        "unchanged_poll_ms_p50": round(statistics.median(timings["unchanged"]), 2),
        "plain_ms_p50": round(statistics.median(timings["plain"]), 2),
        "board_vs_plain": round(statistics.median(timings["board"]) / statistics.median(timings["plain"]), 2),
        "board_bytes_gzip": sizes["board"],
        "plain_bytes_gzip": sizes["plain"],
        "page_bytes_gzip": page,
        "first_open_bytes": page + sizes["board"],
    }


def format_board(report: dict[str, Any]) -> str:
    c = report["config"]
    return "\n".join([
        f"a user with {c['memories']} memories beside {c['other_users']} others (50 each), {c['rounds']} rounds:",
        f"  board request: {report['board_ms_p50']} ms p50, {report['board_ms_p95']} ms p95 "
        f"({report['cards']} cards, {report['board_bytes_gzip']} bytes gzip)",
        f"  plain baseline (the memories as bare JSON): {report['plain_ms_p50']} ms p50, "
        f"{report['plain_bytes_gzip']} bytes; the board costs {report['board_vs_plain']}x",
        f"  a poll with nothing changed: {report['unchanged_poll_ms_p50']} ms p50",
        f"  the page's files: {report['page_bytes_gzip']} bytes gzip; first open in all: "
        f"{report['first_open_bytes']} bytes",
    ])

