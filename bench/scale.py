"""``python -m bench scale``: a database of synthetic users, then the costs that grow with it.

Setup bulk-loads each user's rows in one transaction (``SQLiteStore.apply_changes``, the engine's storage
write) after preparing them as ``remember`` would (``MemoryEngine._prepare``: normalised text, keywords,
index terms), cached per distinct sentence because segmenting a million rows would dominate the setup.
The measured parts go through the engine's API exactly as the bot calls it:
``build_context`` + ``render_reference`` per turn, ``remember`` per write, ``decay`` over every
scope, ``make_backup`` for the nightly backup.
"""

from __future__ import annotations

import random
import tempfile
import time
import tracemalloc
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import synth
from bench.timing import Stopwatch, elapsed, machine, peak_rss_mb, progress
from companion.chat.persona import render_reference
from companion.config.settings import Settings
from companion.core.models import DynamicTrait, MemoryDraft, Profile, Scope
from companion.ops.backup import make_backup
from companion.recall.index import RecallFilter
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore
from memory import MemoryEngine

NOW = datetime(2025, 6, 1, 4, 0, tzinfo=UTC)
TARGETS = {"recall_p95_ms_typical": 2.0, "recall_p95_ms_big": 10.0, "decay_s_per_1m_rows": 10.0,
           "backup_s_per_1m_rows": 30.0}
SAMPLED_USERS = 50
INDEX_REBUILDS = 5
NEW_USERS = 20


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    users: int = 10_000
    per_user: int = 100
    big_user: int = 10_000
    turns: int = 1000  # recall samples per user kind
    writes: int = 200  # remember() samples per user kind
    seed: int = 7


class _Turns:
    """One simulated session per user: turn counter and recall cooldown, as ChatService keeps them."""

    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine
        self.turn: dict[Scope, int] = {}
        self.cooldown: dict[Scope, dict[int, int]] = {}

    async def run(self, scope: Scope, text: str, now: datetime) -> int:
        turn = self.turn[scope] = self.turn.get(scope, 0) + 1
        cooldown = self.cooldown.setdefault(scope, {})
        context = await self.engine.build_context(scope, text, now, turn=turn, cooldown=cooldown)
        for recalled in context.recalled:
            cooldown[recalled.memory.id] = turn
        render_reference(context, now, self.engine.config.tz)
        return len(context.recalled)


async def run_scale(config: ScaleConfig, workdir: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        root = workdir or Path(tmp)
        settings = Settings(_env_file=None, data_dir=root / "data", backup_dir=root / "backups")  # type: ignore[call-arg]
        store = await SQLiteStore.open(settings.db_path)
        try:
            engine = await MemoryEngine.create(store, settings, KeywordExtractor())
            report = await _measure(engine, store, settings, config)
        finally:
            await store.close()
        report["reopen_s"] = await _reopen(settings)
        return report


async def _measure(
    engine: MemoryEngine, store: SQLiteStore, settings: Settings, config: ScaleConfig
) -> dict[str, Any]:
    rng = random.Random(config.seed)
    big = Scope(config.users + 1)
    report: dict[str, Any] = {"config": asdict(config), "targets": TARGETS}
    report["build"] = await _build(engine, store, config, big, rng)
    report["rss_mb_after_build"] = peak_rss_mb()
    typical = rng.sample(range(1, config.users + 1), min(SAMPLED_USERS, config.users))
    sampled = [Scope(n) for n in typical]
    for scope in [*sampled, big]:
        await _give_profile(store, scope)
    report["recall_typical"] = await _recall(engine, sampled, config.turns, rng)
    report["recall_big"] = await _recall(engine, [big], config.turns, rng)
    report["stages_typical"] = await _stages(engine, sampled, config.turns, rng)
    report["stages_big"] = await _stages(engine, [big], config.turns, rng)
    report["index_build_big_ms"], report["index_mb_big"] = await _index_build(engine, big)
    report["write_typical"] = await _writes(engine, sampled, config.writes, rng)
    report["write_big"] = await _writes(engine, [big], config.writes, rng)
    report["write_new_user"] = await _new_users(engine, config, rng)
    report["rss_mb_after_recall"] = peak_rss_mb()
    report["size"] = _sizes(settings.db_path)
    report["backup"] = await _backup(store, settings, report["build"]["rows"])
    report["decay"] = await _decay(engine, report["build"]["rows"] + 2 * config.writes + NEW_USERS)
    report["rss_mb_peak"] = peak_rss_mb()
    report["machine"] = machine()
    return report


class _Prepared:
    """``engine._prepare`` once per distinct sentence; rows differ from it only in date and numbers."""

    def __init__(self, engine: MemoryEngine) -> None:
        self.engine = engine
        self._cache: dict[tuple[str, tuple[str, ...]], MemoryDraft] = {}

    def __call__(self, draft: MemoryDraft) -> MemoryDraft:
        date, _, text = draft.event.partition(" ")
        key = (text, tuple(draft.keywords))
        proto = self._cache.get(key)
        if proto is None:
            proto = self._cache[key] = self.engine._prepare(replace(draft, event=text))
        return replace(proto, event=f"{date} {proto.event}", importance=draft.importance,
                       validity=draft.validity, created_at=draft.created_at)

    def many(self, drafts: list[MemoryDraft]) -> list[MemoryDraft]:
        return [self(d) for d in drafts]


async def _build(
    engine: MemoryEngine, store: SQLiteStore, config: ScaleConfig, big: Scope, rng: random.Random
) -> dict[str, Any]:
    """One transaction per user; the big user's rows go in chunks so no single statement list is huge."""
    rows = 0
    prepare = _Prepared(engine)
    # Seconds per slice of 10% of the users: shows whether adding a user gets dearer as tables accumulate.
    slices: list[float] = []
    slice_size = max(config.users // 10, 1)
    with elapsed() as took:
        mark = time.perf_counter()
        for number in range(1, config.users + 1):
            drafts = prepare.many(synth.memories(rng, config.per_user, NOW))
            await store.apply_changes(Scope(number), NOW, inserts=drafts)
            rows += config.per_user
            progress("users loaded", number, config.users)
            if number % slice_size == 0:
                slices.append(round(time.perf_counter() - mark, 2))
                mark = time.perf_counter()
        for start in range(0, config.big_user, 1000):
            count = min(1000, config.big_user - start)
            await store.apply_changes(big, NOW, inserts=prepare.many(synth.memories(rng, count, NOW)))
            rows += count
    return {"rows": rows, "tables": config.users + 1, "seconds": round(took[0], 2),
            "rows_per_s": round(rows / took[0]) if took[0] else 0, "users_per_slice": slice_size,
            "seconds_per_slice": slices}


async def _give_profile(store: SQLiteStore, scope: Scope) -> None:
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
            with cold if n == 0 else warm:
                recalled += await session.run(scope, text, NOW)
    return {"cold": cold.summary(), "warm": warm.summary(),
            "recalled_per_turn": round(recalled / (per_scope * len(scopes)), 3)}


async def _stages(engine: MemoryEngine, scopes: list[Scope], turns: int, rng: random.Random) -> dict[str, Any]:
    """The warm turn split into its parts, timed one by one on the same index class the engine uses."""
    config = engine.config
    rules = RecallFilter(limit=config.recall_max, min_importance=config.recall_min_importance,
                         min_match=config.recall_min_match, cooldown_turns=config.recall_cooldown_turns)
    indexes = {scope: await engine._index(scope) for scope in scopes}  # the engine's own cached index
    keywords, match, rank = Stopwatch(), Stopwatch(), Stopwatch()
    for n in range(turns):
        index = indexes[scopes[n % len(scopes)]]
        text = synth.message(rng)
        with keywords:
            words = engine.keywords.keywords(text)
        with match:
            index.matches(words)
        with rank:
            index.rank(words, NOW, rules)  # includes the match again: rank alone is the difference
    return {"keywords": keywords.summary(), "match": match.summary(), "match_and_rank": rank.summary()}


async def _index_build(engine: MemoryEngine, scope: Scope) -> tuple[dict[str, float], float]:
    """Cold start of the big user, repeated: drop the cached index, then read every row and rebuild it
    (``_invalidate`` and ``_index`` are what the engine itself does after a forget and on a cache miss)."""
    watch = Stopwatch()
    for _ in range(INDEX_REBUILDS):
        engine._invalidate(scope)
        with watch:
            await engine._index(scope)
    engine._invalidate(scope)
    tracemalloc.start()
    await engine._index(scope)
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


async def _new_users(engine: MemoryEngine, config: ScaleConfig, rng: random.Random) -> dict[str, float]:
    """A new user's first memory: creates (and migrates) the user's table while every table exists."""
    watch = Stopwatch()
    for n in range(NEW_USERS):
        with watch:
            await engine.remember(Scope(config.users + 2 + n), [synth.memory(rng, NOW)], NOW)
    return watch.summary()


def _sizes(db: Path) -> dict[str, float]:
    wal = db.with_name(db.name + "-wal")
    return {"db_mb": round(db.stat().st_size / 2**20, 3),
            "wal_mb": round(wal.stat().st_size / 2**20, 3) if wal.exists() else 0.0}


async def _backup(store: SQLiteStore, settings: Settings, rows: int) -> dict[str, Any]:
    """The nightly backup (snapshot + one CSV per user), plus the snapshot alone and the per-row CSV
    formatting cost, to tell how much is per row and how much per file."""
    snapshot = settings.data_dir / "snapshot-only.sqlite3"
    with elapsed() as snap:
        await store.snapshot(snapshot)
    snapshot_mb = snapshot.stat().st_size / 2**20
    with elapsed() as took:
        result = await make_backup(store, settings.backup_dir, NOW, settings.tz, settings.backup_keep_days)
    snapshot.unlink()
    return {"seconds": round(took[0], 2), "snapshot_s": round(snap[0], 2), "snapshot_mb": round(snapshot_mb, 3),
            "files": result.files, "rows": result.rows,
            "per_1m_rows_s": round(took[0] * 1_000_000 / max(rows, 1), 1)}


async def _decay(engine: MemoryEngine, rows: int) -> dict[str, Any]:
    """The daily job over every scope, a day after the data was written, plus the cost of the Python
    rules SQLite calls once per row, to tell per-row from per-table cost."""
    with elapsed() as took:
        report = await engine.decay(NOW + timedelta(days=1))
    return {"seconds": round(took[0], 2), "scopes": report.scopes, "decayed": report.decayed,
            "removed": report.removed, "rows": rows,
            "per_1m_rows_s": round(took[0] * 1_000_000 / max(rows, 1), 1)}


async def _reopen(settings: Settings) -> float:
    """A restart: open the database again (schema of every per-user table parsed, migrations checked)."""
    with elapsed() as took:
        storage = await SQLiteStore.open(settings.db_path)
    await storage.close()
    return round(took[0], 2)


def format_scale(report: dict[str, Any]) -> str:
    """The readable summary printed on stdout (the JSON has everything)."""
    build, backup, decay = report["build"], report["backup"], report["decay"]
    lines = [
        f"database: {build['rows']:,} rows in {build['tables']:,} user tables, loaded in {build['seconds']} s "
        f"({build['rows_per_s']:,} rows/s); {report['size']['db_mb']} MB + {report['size']['wal_mb']} MB WAL, "
        f"snapshot {backup['snapshot_mb']} MB; reopen {report['reopen_s']} s",
        "per-turn recall (keywords + match + rank + prompt), ms:      p50      p95      p99",
    ]
    for label, key in (("typical user, warm", "recall_typical"), ("big user, warm", "recall_big")):
        lat = report[key]["warm"]
        lines.append(f"  {label:<52}{lat['p50']:9.3f}{lat['p95']:9.3f}{lat['p99']:9.3f}")
    for label, key in (("typical user, cold (first turn)", "recall_typical"), ("big user, cold", "recall_big")):
        lat = report[key]["cold"]
        lines.append(f"  {label:<52}{lat['p50']:9.3f}{lat['p95']:9.3f}{lat['p99']:9.3f}")
    writes = (("write (remember), typical user", "write_typical"), ("write (remember), big user", "write_big"),
              ("first write of a new user (creates its table)", "write_new_user"))
    for label, key in writes:
        lat = report[key]
        lines.append(f"  {label:<52}{lat['p50']:9.3f}{lat['p95']:9.3f}{lat['p99']:9.3f}")
    lines += [
        f"big-user index: rebuild p50 {report['index_build_big_ms']['p50']} ms, {report['index_mb_big']} MB",
        f"decay + cleanup: {decay['seconds']} s for {decay['rows']:,} rows ({decay['decayed']:,} decayed, "
        f"{decay['removed']:,} removed); {decay['per_1m_rows_s']} s per 1M rows",
        f"backup: {backup['seconds']} s ({backup['files']:,} files, {backup['rows']:,} rows; snapshot alone "
        f"{backup['snapshot_s']} s); {backup['per_1m_rows_s']} s per 1M rows",
        f"peak memory: {report['rss_mb_peak']} MB (after build {report['rss_mb_after_build']} MB)",
    ]
    return "\n".join(lines)
