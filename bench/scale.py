"""``python -m bench scale``: a database of synthetic users, then the costs that grow with it.

The data set is built through the engine's ``remember()`` (one call per user with all of its memories,
the big user in calls of 500), in a child process unless ``isolate`` is off: the measured process
then starts like the bot after a restart (with every module the bot imports, aiogram too), and its peak
memory is the bot's, not the loader's. Every
user has companion mode on, the start-up worst case. The measured parts go through the engine's API as
the bot calls it: start-up (open the store, load the engine and the active scopes, the first reply's
memory context), ``open_turn`` + ``MemoryTurn.context`` + ``render_reference`` per turn, ``remember`` per write,
``make_backup`` for the nightly backup, ``decay`` over every scope while a user keeps chatting; and
the same backup and decay done the plainest way (``bench/plain.py``) for the ratio.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import random
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import synth
from bench.plain import plain_csv, plain_decay
from bench.server import server_schema, server_size_mb
from bench.timing import Stopwatch, elapsed, machine, peak_rss_mb, progress
from companion.chat.prompt import render_reference
from companion.config.settings import Settings
from companion.core.models import DynamicTrait, Profile, Scope
from companion.engine.cache import IndexCache
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import SNAPSHOT_NAME, make_backup
from companion.ops.engine_assembly import engine_on
from companion.recall.index import RecallFilter
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import Maintenance, MemoryStore
from companion.storage.factory import open_store
from memory import MemoryEngine

NOW = datetime(2025, 6, 1, 4, 0, tzinfo=UTC)
TARGETS = {"recall_p95_ms_typical": 1.0, "recall_p95_ms_big": 10.0, "decay_s": 10.0, "backup_s": 30.0,
           "startup_s": 1.0, "write_new_user_p50_ms": 5.0, "build_rows_per_s": 5000.0, "rss_mb_peak": 300.0,
           "plain_ratio": 2.0}
SAMPLED_USERS = 50
INDEX_REBUILDS = 5
NEW_USERS = 20
NEW_USER_PAUSE_S = 0.05  # new users ~50 ms apart: far closer than a real bot sees them, room for the refill
BIG_CHUNK = 500
CHAT_PAUSE_S = 0.2


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    users: int = 10_000
    per_user: int = 100
    big_user: int = 10_000
    turns: int = 1000  # recall samples per user kind
    writes: int = 200  # remember() samples per user kind
    seed: int = 7
    isolate: bool = True  # build the data set in a child process
    database_url: str = ""  # a postgresql:// server instead of SQLite in the work folder
    forgets: int = 50  # forget() samples (one memory each) per kind of user


class _Turns:
    """One simulated session per user: turn counter and recall cooldown, as ChatService keeps them; each
    turn makes the chat pipeline's two store calls, ``open_turn`` before the context (one read) and
    ``MemoryTurn.finish`` after the reply (one write: the accesses of what was shown)."""

    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine
        self.turn: dict[Scope, int] = {}
        self.cooldown: dict[Scope, dict[int, int]] = {}
        self.finish = Stopwatch()  # the write after the reply: not part of what the reply waits for

    async def run(self, scope: Scope, text: str, now: datetime, watch: Stopwatch) -> int:
        """The memory context a reply waits for, timed by ``watch``; its write is timed apart (``finish``)."""
        turn = self.turn[scope] = self.turn.get(scope, 0) + 1
        cooldown = self.cooldown.setdefault(scope, {})
        with watch:
            memory = await self.engine.open_turn(scope)  # one read, then no store call
            context = await memory.context(text, now, turn=turn, cooldown=cooldown)
            render_reference(context, now, self.engine.config.tz)
        for recalled in context.recalled:
            cooldown[recalled.memory.id] = turn
        with self.finish:
            await memory.finish(now, shown=context.recalled)
        return len(context.recalled)


def _settings(root: Path, config: ScaleConfig) -> Settings:
    # The default capacity (200) would evict the big user's memories: lift it to hold the data set.
    capacity = min(max(config.big_user, config.per_user, 200) * 2, 100_000)
    return Settings(_env_file=None, data_dir=root / "data", backup_dir=root / "backups",  # type: ignore[call-arg]
                    memory_capacity=capacity, database_url=config.database_url)


async def run_scale(config: ScaleConfig, workdir: Path | None = None) -> dict[str, Any]:
    if config.database_url:
        async with server_schema(config.database_url, "bench_scale") as url:
            return await _run_scale(replace(config, database_url=url), workdir)
    return await _run_scale(config, workdir)


async def _run_scale(config: ScaleConfig, workdir: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = workdir or Path(tmp)
        settings = _settings(root, config)
        report: dict[str, Any] = {"config": asdict(config), "targets": TARGETS}
        if config.isolate:
            report["build"] = await _in_child(_build_in_child, root, config)
        else:
            report["build"] = await _build_db(root, config)
        report["rows"] = {"memories": report["build"]["rows"], "users": config.users, "per_user": config.per_user,
                          "big_user": config.big_user, "tables": report["build"]["tables"]}
        report["rss_mb_imports"] = _load_bot_modules()
        report["startup"], store, engine = await _startup(settings)
        report["semantic"] = engine.dense.model if engine.dense is not None else None
        try:
            await _measure(engine, store, settings, config, root, report)
        finally:
            await store.close()
        return report


# What ``python bot.py`` imports before it answers (aiogram's types alone are ~120 MB): loaded here so the
# measured peak is the bot's, not that of a process without Telegram.
BOT_MODULES = ("aiogram", "aiogram.client.session.aiohttp", "handlers", "handlers.admin", "handlers.commands",
               "handlers.delivery", "handlers.groups", "handlers.memory_list", "handlers.forgetting",
               "handlers.reviews", "handlers.user_commands", "companion.chat.pipeline", "companion.engine.tools",
               "companion.ops.jobs.scheduled", "companion.ops.jobs.proactive", "companion.ops.jobs.upgrade",
               "companion.llm.client")


def _load_bot_modules() -> float:
    for name in BOT_MODULES:
        importlib.import_module(name)
    return peak_rss_mb()


async def _in_child(work: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Work that must not count in the bot process's peak memory (the loader's caches; the plain way's
    SQLite connection, ~50 MB of parsed schema at 10,000 tables), in a process of its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return await asyncio.to_thread(pool.apply, work, args)


def _build_in_child(root: Path, config: ScaleConfig) -> dict[str, Any]:
    return asyncio.run(_build_db(root, config))


async def _build_db(root: Path, config: ScaleConfig) -> dict[str, Any]:
    # Loaded as keywords only, as a database written before semantic recall (``reindex`` encodes it): with the
    # in-process model, a million memories would take hours to encode. The measured process uses the default.
    settings = _settings(root, config).model_copy(update={"embeddings": "off"})
    store = await open_store(settings.database)
    try:
        engine = await engine_on(store, settings, KeywordExtractor())
        return await _build(engine, config)
    finally:
        await store.close()


async def _build(engine: MemoryEngine, config: ScaleConfig) -> dict[str, Any]:
    """Every memory through ``remember()``: one call per user (its whole batch), the big user in chunks."""
    rng = random.Random(config.seed)
    rows = 0
    # Seconds per slice of 10% of the users: shows whether adding a user gets dearer as tables accumulate.
    slices: list[float] = []
    slice_size = max(config.users // 10, 1)
    cpu = time.process_time()
    with elapsed() as took:
        mark = time.perf_counter()
        for number in range(1, config.users + 1):
            scope = Scope(number)
            await engine.remember(scope, synth.memories(rng, config.per_user, NOW), NOW)
            await engine.set_active(scope, True, NOW)
            rows += config.per_user
            progress("users loaded", number, config.users)
            if number % slice_size == 0:
                slices.append(round(time.perf_counter() - mark, 2))
                mark = time.perf_counter()
        big = Scope(config.users + 1)
        for start in range(0, config.big_user, BIG_CHUNK):
            count = min(BIG_CHUNK, config.big_user - start)
            await engine.remember(big, synth.memories(rng, count, NOW), NOW)
            rows += count
    cpu = time.process_time() - cpu  # this process only: the rate without the other work on the machine
    return {"rows": rows, "tables": config.users + 1, "seconds": round(took[0], 2),
            "rows_per_s": round(rows / took[0]) if took[0] else 0, "cpu_s": round(cpu, 2),
            "rows_per_cpu_s": round(rows / cpu) if cpu else 0, "users_per_slice": slice_size,
            "seconds_per_slice": slices, "rss_mb_loader": peak_rss_mb()}


async def _startup(settings: Settings) -> tuple[dict[str, Any], MemoryStore, MemoryEngine]:
    """A restart, as ``bot.companion`` does it: open the store while the keyword dictionaries load in a
    thread, the engine, what is left of the dictionaries' load, the active scopes, then the memory context
    of a first reply (its user's index loaded from SQLite)."""
    parts: dict[str, float] = {}
    cpu = time.process_time()
    started = time.perf_counter()
    keywords = KeywordExtractor()
    keywords.preload()  # as the bot does: the dictionaries load while the database opens
    store = await open_store(settings.database)
    parts["open_store_s"] = time.perf_counter() - started
    engine = await engine_on(store, settings, keywords)
    parts["engine_s"] = time.perf_counter() - started - sum(parts.values())
    await engine.ready()
    parts["dictionaries_wait_s"] = time.perf_counter() - started - sum(parts.values())
    active = await engine.active_scopes()
    parts["active_scopes_s"] = time.perf_counter() - started - sum(parts.values())
    first = min(active, key=lambda s: s.key) if active else Scope(1)
    await (await engine.open_turn(first)).context("最近又感冒了，好难受", NOW, turn=1, cooldown={})
    parts["first_context_s"] = time.perf_counter() - started - sum(parts.values())
    total = time.perf_counter() - started
    cpu = time.process_time() - cpu
    return ({"seconds": round(total, 3), "cpu_s": round(cpu, 3), "active_scopes": len(active),
             **{k: round(v, 3) for k, v in parts.items()}},
            store, engine)


async def _measure(
    engine: MemoryEngine, store: MemoryStore, settings: Settings, config: ScaleConfig, root: Path,
    report: dict[str, Any],
) -> None:
    rng = random.Random(config.seed + 1)
    big = Scope(config.users + 1)
    typical = rng.sample(range(1, config.users + 1), min(SAMPLED_USERS, config.users))
    sampled = [Scope(n) for n in typical]
    for scope in [*sampled, big]:
        await _give_profile(store, scope)
    report["recall_typical"] = await _recall(engine, sampled, config.turns, rng)
    report["recall_big"] = await _recall(engine, [big], config.turns, rng)
    cache = IndexCache(store, engine.keywords.keywords)  # the cache class the engine uses, on the same store
    report["stages_typical"] = await _stages(engine, cache, sampled, config.turns, rng)
    report["stages_big"] = await _stages(engine, cache, [big], config.turns, rng)
    report["index_build_big_ms"], report["index_mb_big"] = await _index_build(cache, big)
    cache.clear()  # the bot holds one cache: this second one must not count in its peak memory
    report["write_typical"] = await _writes(engine, sampled, config.writes, rng)
    report["write_big"] = await _writes(engine, [big], config.writes, rng)
    first = config.users + 2
    report["write_new_user"] = await _new_users(engine, store, rng, first=first, pause=NEW_USER_PAUSE_S)
    report["write_new_user_burst"] = await _new_users(engine, store, rng, first=first + NEW_USERS, pause=0.0)
    report["forget_typical"] = await _forgets(engine, sampled, config.forgets)
    report["forget_big"] = await _forgets(engine, [big], config.forgets)
    report["rss_mb_after_recall"] = peak_rss_mb()
    if store.maintenance() is None:  # a server database: no file to copy, its size asked of the server
        report["size"] = {"db_mb": await server_size_mb(config.database_url), "wal_mb": 0.0}
        report["backup"] = await _streamed_backup(store, settings, report["rows"]["memories"])
        report["rss_mb_after_backup"] = peak_rss_mb()
        report["decay"] = await _decay(engine, sampled, rng, report["rows"]["memories"])
        report["rss_mb_peak"] = peak_rss_mb()
        report["decay"].update(plain=None, plain_ratio=None, plain_decay_only_ratio=None,
                               plain_ratio_without_chat=None)
        report["machine"] = machine()
        return
    report["size"] = _sizes(settings.db_path)
    report["backup"] = await _backup(store, settings, root, report["rows"]["memories"])
    report["rss_mb_after_backup"] = peak_rss_mb()
    snapshot = next(settings.backup_dir.glob(f"*/{SNAPSHOT_NAME}"))
    report["decay"] = await _decay(engine, sampled, rng, report["rows"]["memories"])
    report["rss_mb_peak"] = peak_rss_mb()  # the bot's work ends here; the plain runs go in a child process
    plain = await _in_child(plain_decay, snapshot, root, NOW + timedelta(days=1))
    report["decay"]["plain"] = plain
    report["decay"]["plain_ratio"] = round(report["decay"]["seconds"] / max(plain["seconds"], 1e-3), 2)
    report["decay"]["plain_decay_only_ratio"] = round(report["decay"]["seconds"] / max(plain["decay_only_s"], 1e-3), 2)
    report["decay"]["plain_ratio_without_chat"] = round(
        report["decay"]["seconds_without_chat"] / max(plain["seconds"], 1e-3), 2)
    report["machine"] = machine()


async def _give_profile(store: MemoryStore, scope: Scope) -> None:
    """A realistic profile, so each turn pays for the core and the dynamic-trait match like a real user."""
    profile = Profile(core="用户是程序员，喜欢吃火锅和奶茶，养了一只猫叫布丁，周末常去爬山。对花生过敏。",
                      dynamic=[DynamicTrait("最近感冒了，身体不太舒服", ("感冒", "不舒服")),
                               DynamicTrait("最近在准备面试，有点焦虑", ("面试", "焦虑"))])
    await store.save_profile(scope, profile, NOW)


async def _recall(engine: MemoryEngine, scopes: list[Scope], turns: int, rng: random.Random) -> dict[str, Any]:
    """Per-turn cost of memory: keywords, match, rank and prompt assembly (no LLM). The first turn of a
    scope loads its index from SQLite (cold); the rest find it cached (warm)."""
    session = _Turns(engine)
    cold, warm = Stopwatch(), Stopwatch()
    recalled = 0
    per_scope = max(turns // len(scopes), 2)
    for scope in scopes:
        for n in range(per_scope):
            text = synth.message(rng)
            recalled += await session.run(scope, text, NOW, cold if n == 0 else warm)
    return {"cold": cold.summary(), "warm": warm.summary(), "finish": session.finish.summary(),
            "recalled_per_turn": round(recalled / (per_scope * len(scopes)), 3)}


async def _stages(engine: MemoryEngine, cache: IndexCache, scopes: list[Scope], turns: int,
                  rng: random.Random) -> dict[str, Any]:
    """The warm turn split into its parts, timed one by one on the same index class the engine uses."""
    config = engine.config
    rules = RecallFilter(limit=config.recall_max, min_importance=config.recall_min_importance,
                         min_match=config.recall_min_match, cooldown_turns=config.recall_cooldown_turns)
    indexes = {scope: await cache.index(scope) for scope in scopes}
    keywords, match, rank, recall = Stopwatch(), Stopwatch(), Stopwatch(), Stopwatch()
    for n in range(turns):
        scope = scopes[n % len(scopes)]
        index = indexes[scope]
        text = synth.message(rng)
        with keywords:
            words = engine.keywords.keywords(text)
        with match:
            index.matches(words)
        with rank:
            index.rank(words, NOW, rules)  # includes the match again: rank alone is the difference
        with recall:
            await engine.recall(scope, text, NOW)  # the engine's recall alone, without the rest of the context
    return {"keywords": keywords.summary(), "match": match.summary(), "match_and_rank": rank.summary(),
            "engine_recall": recall.summary()}


async def _index_build(cache: IndexCache, scope: Scope) -> tuple[dict[str, float], float]:
    """Cold start of the big user, repeated: drop the cached index, then read every row and rebuild it
    (what the engine's cache does after a forget and on a miss)."""
    watch = Stopwatch()
    for _ in range(INDEX_REBUILDS):
        cache.invalidate(scope)
        with watch:
            await cache.index(scope)
    cache.invalidate(scope)
    tracemalloc.start()
    await cache.index(scope)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return watch.summary(), round(size / 2**20, 1)


async def _writes(engine: MemoryEngine, scopes: list[Scope], count: int, rng: random.Random) -> dict[str, float]:
    """``remember`` of one new memory: keyword prep, dedup plan against the index, insert, reindex."""
    watch = Stopwatch()
    for n in range(count):
        draft = synth.memory(rng, NOW)
        draft.keywords = []  # extraction sometimes leaves keywords out: the engine then segments the text
        if n % 2:
            draft.keywords = synth.memory(rng, NOW).keywords
        with watch:
            await engine.remember(scopes[n % len(scopes)], [draft], NOW)
    return watch.summary()


async def _new_users(
    engine: MemoryEngine, store: MemoryStore, rng: random.Random, *, first: int, pause: float
) -> dict[str, float | None]:
    """A new user's first memory while every other table exists: it takes a spare table (made in the
    background after the last new user). Back to back (``pause=0``) each also waits for the spare being
    made for the one before, or runs its own ``CREATE TABLE`` when the spares run out."""
    watch = Stopwatch()
    for n in range(NEW_USERS):
        await asyncio.sleep(pause)
        with watch:
            await engine.remember(Scope(first + n), [synth.memory(rng, NOW)], NOW)
    # Which path each took. Asked of the store: a second connection would parse the whole schema (~9 MB
    # at 10,000 tables) in this process and count in the bot's peak memory. A server database has no
    # tables per scope: None.
    files = store.maintenance()
    took = None if files is None else sum(
        files.memory_table(Scope(first + n)).startswith("mem_t") for n in range(NEW_USERS))
    return {**watch.summary(), "took_spare": took}


async def _forgets(engine: MemoryEngine, scopes: list[Scope], count: int) -> dict[str, float]:
    """``forget`` of one memory, as /forget does it: tombstone, index, profile, vectors, queue, short-term."""
    watch = Stopwatch()
    victims = [(scope, m.id) for scope in scopes for m in (await engine.memories(scope))[:count]]
    for scope, handle in victims[:count]:
        with watch:
            await engine.forget(scope, [handle])
    return watch.summary()


async def _streamed_backup(store: MemoryStore, settings: Settings, rows: int) -> dict[str, Any]:
    """The nightly backup of a store without a database file: its memories streamed into the same CSV files
    (no snapshot, so no snapshot or plain-csv figures)."""
    with elapsed() as took:
        result = await make_backup(MaintenancePort(store), settings.backup_dir, NOW, settings.tz,
                                   settings.backup_keep_days)
    return {"seconds": round(took[0], 2), "snapshot_s": None, "snapshot_mb": None, "files": result.files,
            "rows": result.rows, "plain": None, "plain_ratio": None,
            "per_1m_rows_s": round(took[0] * 1_000_000 / max(rows, 1), 1)}


def _files(store: MemoryStore) -> Maintenance:
    files = store.maintenance()
    assert files is not None, "bench scale measures the SQLite store"
    return files


def _sizes(db: Path) -> dict[str, float]:
    wal = db.with_name(db.name + "-wal")
    return {"db_mb": round(db.stat().st_size / 2**20, 3),
            "wal_mb": round(wal.stat().st_size / 2**20, 3) if wal.exists() else 0.0}


async def _backup(store: MemoryStore, settings: Settings, root: Path, rows: int) -> dict[str, Any]:
    """The nightly backup (snapshot + one CSV per user), then the snapshot alone and the csv module
    alone on the same snapshot (the plain way), to tell the engine's extras from the unavoidable work."""
    with elapsed() as took:
        result = await make_backup(MaintenancePort(store), settings.backup_dir, NOW, settings.tz,
                                   settings.backup_keep_days)
    spare = root / "snapshot-only.sqlite3"
    with elapsed() as snap:  # the copy alone, as the backup takes it (its journal switch is export work)
        await _files(store).snapshot(spare, standalone=False)
    snapshot_mb = spare.stat().st_size / 2**20
    for leftover in root.glob("snapshot-only.sqlite3*"):
        leftover.unlink()
    plain = await _in_child(plain_csv, result.folder / SNAPSHOT_NAME, root)
    plain_total = snap[0] + plain["seconds"]
    return {"seconds": round(took[0], 2), "snapshot_s": round(snap[0], 2), "snapshot_mb": round(snapshot_mb, 3),
            "files": result.files, "rows": result.rows, "plain": {**plain, "with_snapshot_s": round(plain_total, 2)},
            "plain_ratio": round(took[0] / max(plain_total, 1e-3), 2),
            "per_1m_rows_s": round(took[0] * 1_000_000 / max(rows, 1), 1)}


async def _decay(engine: MemoryEngine, sampled: list[Scope], rng: random.Random, rows: int) -> dict[str, Any]:
    """The daily job over every scope, a day after the data was written, while one user keeps chatting:
    a turn's memory context and a ``remember`` one after the other, timed, until the decay is done."""
    later = NOW + timedelta(days=1)
    session = _Turns(engine)
    turns, writes = Stopwatch(), Stopwatch()
    reader, writer = sampled[0], sampled[-1]
    cpu = time.process_time()
    with elapsed() as took:
        job = asyncio.create_task(engine.decay(later))
        while not job.done():
            await session.run(reader, synth.message(rng), later, turns)
            with writes:
                await engine.remember(writer, [synth.memory(rng, later)], later)
            # A chatting user pauses between messages; back to back, the chat would take most of the
            # lock and CPU and the decay's own time would not be measured.
            await asyncio.sleep(CHAT_PAUSE_S)
        report = await job
    cpu = time.process_time() - cpu
    # The chatting user's own turns and writes run inside the decay's wall time (the decay yields to them).
    chat_s = (sum(turns.samples) + sum(writes.samples)) / 1000
    return {"seconds": round(took[0], 2), "cpu_s": round(cpu, 2), "scopes": report.scopes,
            "chat_s": round(chat_s, 2), "seconds_without_chat": round(took[0] - chat_s, 2),
            "decayed": report.decayed, "removed": report.removed, "rows": rows, "chat_pause_s": CHAT_PAUSE_S,
            "per_1m_rows_s": round(took[0] * 1_000_000 / max(rows, 1), 1),
            "during": {"turn_ms": turns.summary(), "remember_ms": writes.summary()}}


def format_scale(report: dict[str, Any]) -> str:
    """The readable summary printed on stdout (the JSON has everything)."""
    build, backup, decay, start = report["build"], report["backup"], report["decay"], report["startup"]
    lines = [
        f"database: {build['rows']:,} rows in {build['tables']:,} user tables, built through remember() in "
        f"{build['seconds']} s ({build['rows_per_s']:,} rows/s, {build['rows_per_cpu_s']:,} per CPU second); "
        f"{report['size']['db_mb']} MB + "
        f"{report['size']['wal_mb']} MB WAL, snapshot {backup['snapshot_mb']} MB",
        f"start-up: {start['seconds']} s, CPU {start['cpu_s']} s (store {start['open_store_s']}, "
        f"engine {start['engine_s']}, rest of the dictionaries' load {start['dictionaries_wait_s']}, "
        f"{start['active_scopes']:,} active scopes {start['active_scopes_s']}, "
        f"first context {start['first_context_s']})",
        "per-turn memory context (keywords + recall + tiers + prompt), ms:   p50      p95      p99",
    ]
    rows = (("typical user, warm", report["recall_typical"]["warm"]), ("big user, warm", report["recall_big"]["warm"]),
            ("typical user, cold (first turn)", report["recall_typical"]["cold"]),
            ("big user, cold", report["recall_big"]["cold"]),
            ("write (remember), typical user", report["write_typical"]),
            ("write (remember), big user", report["write_big"]),
            ("first write of a new user (takes a spare table)", report["write_new_user"]),
            ("first write, new users back to back (behind the refill)", report["write_new_user_burst"]),
            ("forget one memory, typical user", report["forget_typical"]),
            ("forget one memory, big user", report["forget_big"]),
            ("turn while decay runs", decay["during"]["turn_ms"]),
            ("remember while decay runs", decay["during"]["remember_ms"]))
    for label, lat in rows:
        lines.append(f"  {label:<60}{lat['p50']:9.3f}{lat['p95']:9.3f}{lat['p99']:9.3f}")
    lines += [
        f"big-user index: rebuild p50 {report['index_build_big_ms']['p50']} ms, {report['index_mb_big']} MB",
        f"decay + cleanup: {decay['seconds']} s for {decay['rows']:,} rows ({decay['decayed']:,} decayed, "
        f"{decay['removed']:,} removed)" + ("" if decay["plain"] is None else "; plain one UPDATE + one DELETE "
        f"per table {decay['plain']['seconds']} s (ratio {decay['plain_ratio']}, {decay['plain_ratio_without_chat']} "
        f"without the chatting user's {decay['chat_s']} s; the UPDATEs alone "
        f"{decay['plain']['decay_only_s']} s, ratio {decay['plain_decay_only_ratio']})"),
        f"backup: {backup['seconds']} s ({backup['files']:,} files, {backup['rows']:,} rows)" + (
            ", streamed from the store" if backup["plain"] is None else f"; snapshot alone {backup['snapshot_s']} s"
            f" + csv module alone {backup['plain']['seconds']} s (ratio {backup['plain_ratio']})"),
        f"peak memory: {report['rss_mb_peak']} MB (the bot's modules loaded: {report['rss_mb_imports']} MB; "
        f"loader process {build['rss_mb_loader']} MB; semantic recall: {report.get('semantic') or 'off'})",
    ]
    return "\n".join(lines)
