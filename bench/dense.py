"""``python -m bench recall DATASET --embeddings URL``: the dense path against an operator's embeddings
endpoint, beside the keyword engine, in one replay of the dataset.

Three systems answer every query: ``engine`` (keyword recall, as the bot runs without a backend),
``dense`` (the nearest memories by cosine, no floor) and ``engine+dense`` (what the bot runs with a backend:
both fused by rank, the similarity floor applied). Memories are written through ``remember`` with the dense
retriever detached, then embedded in batches (``DenseRetriever.sync``) before the next query of that user,
so a dataset costs a few requests per user instead of one per memory. Queries without relevant memories
(if the dataset has them) measure false injection: how often a system recalls anything at all.
The model, key and dimensions come from the usual settings (``EMBEDDING_MODEL``, ``EMBEDDING_API_KEY``,
``EMBEDDING_DIMENSIONS``), or ``--embedding-model``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from bench.dataset import DatasetLine, MemoryLine, read_dataset
from bench.metrics import MetricsAccumulator
from bench.recall import draft_for
from bench.timing import write_json
from companion.config.settings import Settings, load_settings
from companion.core.models import Scope
from companion.engine.retrievers import DenseRetriever
from companion.ops.assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

SYSTEMS = ("engine", "dense", "engine+dense")


def dense_settings(url: str, model: str | None, data_dir: Path) -> Settings:
    """The operator's embedding settings with this endpoint (and model); nothing else from the environment
    changes what the engine does."""
    configured = load_settings()
    return load_settings(
        _env_file=None, data_dir=data_dir, embedding_base_url=url,
        embedding_model=model or configured.embedding_model or "bge-m3",
        embedding_api_key=configured.embedding_api_key, embedding_dimensions=configured.embedding_dimensions,
        embedding_batch_size=configured.embedding_batch_size,
        embedding_min_similarity=configured.embedding_min_similarity,
        embedding_query_timeout_seconds=max(configured.embedding_query_timeout_seconds, 10.0),
    )


class DenseReplay:
    def __init__(self, engine: MemoryEngine, dense: DenseRetriever, ks: Sequence[int]) -> None:
        self.engine = engine
        self.dense = dense
        self.results = {name: MetricsAccumulator(ks) for name in SYSTEMS}
        self.injected: Counter[str] = Counter()
        self.notes: Counter[str] = Counter()
        self._rows: dict[tuple[int, int], list[str]] = {}
        self._scopes: dict[str, int] = {}
        self._unembedded: set[int] = set()

    def _ids(self, number: int, handles: Iterable[int], depth: int) -> list[str]:
        out: list[str] = []
        for handle in handles:
            out.extend(self._rows.get((number, handle), ()))
        return out[:depth]

    async def run(self, lines: Iterable[DatasetLine]) -> None:
        for line in lines:
            number = self._scopes.setdefault(line.user, len(self._scopes) + 1)
            scope = Scope(number)
            if isinstance(line, MemoryLine):
                # Embedded in one batch before this user's next query.
                written = await self.engine.remember(scope, [draft_for(line)], now=line.time, embed=False)
                for handle in written[:1]:
                    self._rows.setdefault((number, handle), []).append(line.id)
                self._unembedded.add(number)
                self.notes["memories"] += 1
                continue
            if number in self._unembedded:
                started = time.perf_counter()
                self.notes["vectors written"] += await self.dense.sync(scope, line.time, limit=1_000_000)
                self.notes["embedding ms (writes)"] += round((time.perf_counter() - started) * 1000)
                self._unembedded.discard(number)
            await self._query(scope, number, line.id, line.text, line.time, tuple(line.relevant))

    async def _query(self, scope: Scope, number: int, query_id: str, text: str, at: datetime,
                     relevant: tuple[str, ...]) -> None:
        depth = self.results["engine"].depth
        for name in SYSTEMS:
            started = time.perf_counter()
            if name == "dense":
                handles = [h for h, _ in await self.dense.nearest(scope, text, depth)]
            else:
                self.engine.dense = self.dense if name == "engine+dense" else None
                recalled = await self.engine.recall(scope, text, at, limit=None, min_importance=0.0, cooldown=None)
                self.engine.dense = self.dense
                handles = [r.memory.id for r in recalled]
            elapsed_ms = (time.perf_counter() - started) * 1000
            if relevant:
                self.results[name].add(query_id, self._ids(number, handles, depth), relevant, elapsed_ms)
            elif name != "dense":
                self.injected[name] += bool(handles)
        if not relevant:
            self.notes["queries without a relevant memory"] += 1


async def replay_dense(lines: Iterable[DatasetLine], ks: Sequence[int], url: str, model: str | None) -> DenseReplay:
    with tempfile.TemporaryDirectory(prefix="bench-dense-") as tmp:
        settings = dense_settings(url, model, Path(tmp))
        engine = await open_engine(settings, KeywordExtractor())
        try:
            if engine.dense is None:
                raise ValueError("the embedding backend did not start")
            replay = DenseReplay(engine, engine.dense, ks)
            await replay.run(lines)
            return replay
        finally:
            await engine.close()


def run_dense_command(args: argparse.Namespace) -> int:
    from bench.cli import format_table

    replay = asyncio.run(replay_dense(read_dataset(args.dataset), args.k, args.embeddings, args.embedding_model))
    if replay.dense.available is False:
        print("the embedding backend failed during the run: dense numbers are partial", file=sys.stderr)
    count = replay.results["engine"].count
    if count == 0:
        print(f"{args.dataset}: no queries", file=sys.stderr)
        return 2
    systems = {name: acc.summary() for name, acc in replay.results.items()}
    negatives = replay.notes["queries without a relevant memory"]
    print("dense run: " + ", ".join(f"{k} {v}" for k, v in sorted(replay.notes.items())), file=sys.stderr)
    print(f"{count} queries, model {replay.dense.model}, similarity floor {replay.dense.policy.min_similarity} "
          f"(EMBEDDING_MIN_SIMILARITY), vectors scored by {replay.dense.vectors.backend}")
    print(format_table(systems))
    report: dict[str, object] = {"queries": count, "model": replay.dense.model, **systems}
    if negatives:
        rates = {name: round(replay.injected[name] / negatives, 4) for name in ("engine", "engine+dense")}
        print("false injection over " + str(negatives) + " queries: "
              + ", ".join(f"{name} {rate:.3f}" for name, rate in rates.items()))
        report["false_injection"] = rates
    if args.json:
        write_json(args.json, report)
    return 0
