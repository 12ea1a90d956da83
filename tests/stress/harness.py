"""The stress proofs' common parts: ``python bot.py`` as a real process against the fake servers, a
fake LLM with random delays whose extraction answers name the speaking user, and the checks on the
SQLite file left behind. ``STRESS=full`` (``make stress``) runs the long versions and records their
figures in ``bench/results/stress.json``; without it each proof runs a small sample inside ``make test``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import random
import re
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from companion.ops.backup.nightly import IN_PROGRESS
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import Answer, request_text
from tests.scripted import EXTRACT_MARK, PROFILE_MARK
from tests.support import table_of

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "stress.json"
FULL = os.environ.get("STRESS") == "full"
# Every user line carries its author's tag; extraction turns each tagged line into one memory that
# quotes the tag, so a memory in the wrong scope is visible from its text alone.
TAG = re.compile(r"编号(\d+)-(\d+)")


def scale(fast: int, full: int) -> int:
    return full if FULL else fast


def record(name: str, figures: dict[str, Any]) -> None:
    """Keep the figures of a full run for BENCHMARKS.md; sample runs inside ``make test`` record nothing."""
    if not FULL:
        return
    with (Path(tempfile.gettempdir()) / "companion-stress.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # proofs may run in parallel processes
        data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        data[name] = {**figures, "recorded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        RESULTS.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def user_line(uid: int, n: int) -> str:
    return f"今天第{n}件事：我去公园散步了，编号{uid}-{n}"


@dataclass
class TaggedModel:
    """Chat replies and extraction answers after a random delay; extraction returns one memory per
    tagged user line. ``extracted`` counts each tag the model has been asked to extract."""

    delay: tuple[float, float] = (0.05, 0.5)
    rng: random.Random = field(default_factory=lambda: random.Random(11))
    extracted: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: {"reply": 0, "extraction": 0, "profile": 0})

    def install(self, llm: FakeLLM) -> None:
        llm.set_chat_reply(self.chat)
        llm.set_json_reply(self.json)

    async def _wait(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.delay))

    async def chat(self, body: dict[str, Any]) -> Answer:
        await self._wait()
        self.calls["reply"] += 1
        return "嗯嗯，我在听呢，你接着说。"

    async def json(self, body: dict[str, Any]) -> str:
        await self._wait()
        text = request_text(body)
        if PROFILE_MARK in text:
            self.calls["profile"] += 1
            return json.dumps({"core": "喜欢散步", "dynamic": []}, ensure_ascii=False)
        if EXTRACT_MARK not in text:
            return '{"memories": []}'
        self.calls["extraction"] += 1
        dialogue = text.split("对话：", 1)[-1]
        memories = []
        for line in dialogue.splitlines():
            if "用户：" not in line:
                continue
            for uid, n in TAG.findall(line):
                tag = f"{uid}-{n}"
                self.extracted[tag] = self.extracted.get(tag, 0) + 1
                memories.append({"event": f"去公园散步（编号{tag}）", "keywords": ["公园", "散步", f"编号{tag}"],
                                 "importance": 60, "validity": "30d", "type": "event"})
        return json.dumps({"memories": memories}, ensure_ascii=False)


def bot_env(tg: FakeTelegram, llm: FakeLLM, root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "LLM_", "STRESS"))}
    env.update(
        TELEGRAM_BOT_TOKEN=tg.token, TELEGRAM_API_BASE=tg.base_url, LLM_API_KEY="sk-stress-secret",
        LLM_BASE_URL=llm.base_url, LLM_MAX_RETRIES="0", LLM_TIMEOUT_SECONDS="5",
        DATA_DIR=str(root / "data"), BACKUP_DIR=str(root / "backups"), QUIET_SECONDS="0",
        EXTRACT_EVERY_MIN="5", EXTRACT_EVERY_MAX="5", LOG_LEVEL="INFO", PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class BotProcess:
    """One ``python bot.py [args]`` run; its output goes to a file (a pipe would fill up under load)."""

    def __init__(self, env: dict[str, str], root: Path, *args: str, tg: FakeTelegram | None = None) -> None:
        self.env, self.root, self.args = env, root, args
        # Calls seen before this start, so ``started`` waits for this process's own calls.
        calls = [name.lower() for name, _ in tg.calls] if tg is not None else []
        self.commands_before, self.polls_before = calls.count("setmycommands"), calls.count("getupdates")
        self.log_path = root / f"bot-{time.monotonic_ns()}.log"
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> BotProcess:
        handle = self.log_path.open("wb")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, str(ROOT / "bot.py"), *self.args, env=self.env, cwd=self.root,
                stdout=handle, stderr=asyncio.subprocess.STDOUT,
            )
        finally:
            handle.close()
        return self

    @property
    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self, within: float = 30.0) -> tuple[int, float]:
        """SIGTERM; returns (exit code, seconds until exit). Killed (and -9 returned) after ``within``."""
        assert self.proc is not None
        started = time.perf_counter()
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            await self.kill()
            return -9, time.perf_counter() - started
        return code, time.perf_counter() - started

    async def wait(self, within: float = 120.0) -> int:
        assert self.proc is not None
        return await asyncio.wait_for(self.proc.wait(), within)


def polls(tg: FakeTelegram) -> int:
    return sum(1 for name, _ in tg.calls if name.lower() == "getupdates")


async def started(tg: FakeTelegram, bot: BotProcess, timeout: float = 60.0) -> None:
    """Wait until this process start has registered its commands and polls (counted from its start)."""
    await tg.wait_for_call("setMyCommands", timeout, count=bot.commands_before + 1)
    await tg.wait_for_call("getUpdates", timeout, count=bot.polls_before + 1)
    assert bot.proc is not None and bot.proc.returncode is None, bot.output[-3000:]


def db_path(root: Path) -> Path:
    return root / "data" / "memory.sqlite3"


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def memory_tables(db: Path) -> dict[str, list[str]]:
    """Every registered scope's live (non-tombstoned) events, by scope key (``u42``, ``cn100_u42``); the
    table may be ``mem_<key>`` or a spare the scope took (``scopes.table_id``)."""
    conn = sqlite3.connect(db)
    try:
        tables = {str(key): table_of(conn, str(key)) for (key,) in conn.execute("SELECT key FROM scopes")}
        return {key: [r[0] for r in conn.execute(f'SELECT event FROM "{table}" WHERE event != \'\'')]
                for key, table in tables.items() if table is not None}
    finally:
        conn.close()


def queued_texts(db: Path) -> list[str]:
    """The user text of every turn still queued for extraction."""
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT user_text FROM pending_turns")]


def count_rows(db: Path, table: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
    finally:
        conn.close()


def half_written_backups(backup_dir: Path) -> list[str]:
    """Backup folders that look finished (no in-progress marker) but are not: a snapshot that does not
    open cleanly, a temporary file left behind, or fewer CSV files than the snapshot has scopes with memories."""
    problems: list[str] = []
    for folder in sorted(p for p in backup_dir.glob("*") if p.is_dir()) if backup_dir.exists() else []:
        if (folder / IN_PROGRESS).exists():
            continue  # marked unfinished: restore refuses it and the next start backs up again
        snapshot = folder / "memory.sqlite3"
        leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
        if leftovers:
            problems.append(f"{folder.name}: temporary files {leftovers}")
        if not snapshot.exists():
            continue
        if integrity(snapshot) != "ok":
            problems.append(f"{folder.name}: snapshot fails integrity_check")
            continue
        with_rows = [t for t, events in memory_tables(snapshot).items() if events]
        csvs = list(folder.glob("*.csv"))
        if len(csvs) < len(with_rows):
            problems.append(f"{folder.name}: {len(csvs)} CSV files for {len(with_rows)} scopes with memories")
    return problems


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)
