"""``python -m bench vector-search``: one nearest-neighbour search over a scope of N stored vectors, by each
scorer this machine has: the numpy fallback, and sqlite-vec when it loads (on the store's connection or
through an optional extension-loading driver, see ``companion.storage.sqlite.vectors``). Random unit vectors;
wall and CPU time per search, since the machine may be shared."""

from __future__ import annotations

import math
import random
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.timing import latency_summary, machine
from companion.core.models import MemoryDraft, Scope, Validity
from companion.storage.sqlite import SQLiteStore
from companion.storage.sqlite.vectors import VectorRow, VectorStore

NOW = datetime(2025, 6, 1, tzinfo=UTC)
MODEL = "bench-random"
BATCH = 1000


def unit_vector(rng: random.Random, dim: int) -> list[float]:
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


async def run_vector_search(sizes: Sequence[int], dim: int, searches: int, k: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    for size in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-vectors-") as tmp:
            store = await SQLiteStore.open(Path(tmp) / "memory.sqlite3")
            scorers = [await VectorStore.open(store, try_sqlite_vec=False), await VectorStore.open(store)]
            try:
                scope = Scope(1)
                handles: list[int] = []
                for start in range(0, size, BATCH):
                    drafts = [MemoryDraft(event=f"memory {i}", keywords=["bench"], importance=60,
                                          validity=Validity.PERMANENT) for i in range(start, min(size, start + BATCH))]
                    handles += await store.apply_changes(scope, NOW, inserts=drafts)
                rows = [VectorRow(h, "x", unit_vector(rng, dim)) for h in handles]
                before = _file_bytes(Path(tmp))
                await scorers[0].put(scope, MODEL, rows, NOW)
                figures: dict[str, Any] = {"bytes_per_vector": round((_file_bytes(Path(tmp)) - before) / size)}
                for scorer in scorers:
                    name = "numpy" if scorer.backend == "python" else f"sqlite-vec ({scorer.driver})"
                    if name in figures:
                        continue
                    wall: list[float] = []
                    cpu: list[float] = []
                    for _ in range(searches):
                        query = unit_vector(rng, dim)
                        started, cpu_started = time.perf_counter(), time.process_time()
                        await scorer.nearest(scope, MODEL, query, k)
                        wall.append((time.perf_counter() - started) * 1000)
                        cpu.append((time.process_time() - cpu_started) * 1000)
                    figures[name] = {**latency_summary(wall), "cpu": latency_summary(cpu)}
                out[str(size)] = {"bytes_per_vector": figures.pop("bytes_per_vector"), "scorers": figures}
            finally:
                for scorer in scorers:
                    await scorer.close()
                await store.close()
    return {"dim": dim, "k": k, "sizes": out, "machine": machine()}


def _file_bytes(folder: Path) -> int:
    """The database file in ``folder`` once its write-ahead log is folded into it (the store is idle)."""
    [path] = folder.rglob("memory.sqlite3")
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path.stat().st_size


async def run_encode(count: int, seed: int) -> dict[str, Any] | None:
    """The in-process model (multilingual-e5-small) encoding ``count`` synthetic Chinese memories as a write
    does, in batches of the writer's size: milliseconds per memory (wall and CPU) and the hours 1,000,000
    would take on one core. None where the model's wheel is not installed."""
    from bench import synth
    from companion.llm.embeddings import E5Embedder

    if not E5Embedder.installed():
        return None
    embedder = E5Embedder()
    await embedder.load()
    texts = [draft.event for draft in synth.memories(random.Random(seed), count, NOW)]
    cpu, started = time.process_time(), time.perf_counter()
    await embedder.embed(texts)
    wall_ms = (time.perf_counter() - started) * 1000 / count
    cpu_ms = (time.process_time() - cpu) * 1000 / count
    await embedder.close()
    return {"memories": count, "mean_chars": round(sum(map(len, texts)) / count, 1), "wall_ms_per_memory":
            round(wall_ms, 2), "cpu_ms_per_memory": round(cpu_ms, 2),
            "hours_per_million_one_core": round(cpu_ms * 1_000_000 / 3_600_000, 2)}
