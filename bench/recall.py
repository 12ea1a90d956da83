"""Replays a dataset through each system in file order and scores every query as it comes."""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from bench.bm25 import ScopedBM25
from bench.dataset import DatasetLine, MemoryLine, QueryLine
from bench.metrics import MetricsAccumulator, Summary
from companion.config.settings import Settings
from companion.core.models import MemoryDraft, Scope, Validity
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

# A dataset memory without importance must still be recallable by the bot (its floor is 50).
DEFAULT_IMPORTANCE = 60
# Datasets rarely say how long a fact stays true; LoCoMo's turns are months older than its questions,
# and the engine skips expired memories, so an unlabelled memory is kept for good.
DEFAULT_VALIDITY = Validity.PERMANENT


def run_bm25(lines: Iterable[DatasetLine], ks: Sequence[int],
             extractor: KeywordExtractor) -> MetricsAccumulator:
    """BM25 over ``extractor.tokens``; latency covers query tokenisation plus search, as the engine's will."""
    index = ScopedBM25()
    results = MetricsAccumulator(ks)
    for line in lines:
        if isinstance(line, MemoryLine):
            index.add(line.user, line.id, extractor.tokens(line.text))
            continue
        started = time.perf_counter()
        hits = index.search(line.user, extractor.tokens(line.text), results.depth)
        elapsed_ms = (time.perf_counter() - started) * 1000
        results.add(line.id, [doc_id for doc_id, _ in hits], line.relevant, elapsed_ms)
    return results


def group_of(query: QueryLine) -> str:
    """The subset a query belongs to, for per-subset tables: LoCoMo's category (from its query id),
    otherwise the user's source prefix (a MemDaily file, "dulemon")."""
    _, _, tail = query.id.rpartition(":")
    return tail if tail.startswith("cat") else query.user.rpartition(":")[0] or query.user


def breakdown(lines: Iterable[DatasetLine], systems: Mapping[str, MetricsAccumulator],
              ks: Sequence[int]) -> dict[str, dict[str, Summary]]:
    """Per-subset summaries of each system; results are matched to queries by file order."""
    queries = [line for line in lines if isinstance(line, QueryLine)]
    out: dict[str, dict[str, Summary]] = {}
    for name, results in systems.items():
        groups: dict[str, MetricsAccumulator] = {}
        for query, result in zip(queries, results.results, strict=True):
            acc = groups.setdefault(group_of(query), MetricsAccumulator(ks))
            acc.add(result.query_id, result.ranked_ids, result.relevant, result.latency_ms)
        for group, acc in groups.items():
            out.setdefault(group, {})[name] = {"queries": acc.count, **acc.summary()}
    return dict(sorted(out.items()))


def draft_for(line: MemoryLine) -> MemoryDraft:
    """The dataset memory as the engine would receive it. Keywords left empty get the engine's own."""
    return MemoryDraft(
        event=line.text,
        keywords=list(line.keywords or ()),
        importance=DEFAULT_IMPORTANCE if line.importance is None else line.importance,
        validity=DEFAULT_VALIDITY if line.validity is None else Validity(line.validity),
        created_at=line.time,
    )


class _RowMap:
    """Engine row ids -> dataset ids. The engine merges a retold event into its earlier row, so one row
    can stand for several dataset memories; they are expanded in the order they were written."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], list[str]] = {}

    def add(self, scope: int, row: int, dataset_id: str) -> None:
        self.rows.setdefault((scope, row), []).append(dataset_id)

    def expand(self, scope: int, rows: Iterable[int], depth: int) -> list[str]:
        out: list[str] = []
        for row in rows:
            out.extend(self.rows.get((scope, row), ()))
            if len(out) >= depth:
                break
        return out[:depth]


async def run_engine(lines: Iterable[DatasetLine], ks: Sequence[int], *, data_dir: Path | None = None,
                     notes: Counter[str] | None = None) -> MetricsAccumulator:
    """The memory engine on the same lines: each memory goes through ``remember`` (the write path the
    bot's extraction uses), each query through ``recall`` at the query's time with the per-turn cap,
    the importance floor and the cooldown lifted. ``notes`` collects write statistics (merges)."""
    notes = Counter() if notes is None else notes
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        settings = Settings(_env_file=None, data_dir=data_dir or Path(tmp))  # type: ignore[call-arg]
        engine = await MemoryEngine.open(settings, KeywordExtractor())
        try:
            return await _replay(engine, lines, ks, notes)
        finally:
            await engine.close()


async def _replay(engine: MemoryEngine, lines: Iterable[DatasetLine], ks: Sequence[int],
                  notes: Counter[str]) -> MetricsAccumulator:
    scopes: dict[str, int] = {}
    rows = _RowMap()
    results = MetricsAccumulator(ks)
    for line in lines:
        number = scopes.setdefault(line.user, len(scopes) + 1)
        scope = Scope(number)
        if isinstance(line, MemoryLine):
            written = await engine.remember(scope, [draft_for(line)], now=line.time)
            notes["memories"] += 1
            if not written:
                notes["memories the engine dropped"] += 1
            for row in written[:1]:  # one draft writes or merges into exactly one row
                rows.add(number, row, line.id)
            continue
        started = time.perf_counter()
        recalled = await engine.recall(scope, line.text, line.time, limit=None, min_importance=0.0,
                                       cooldown=None)
        elapsed_ms = (time.perf_counter() - started) * 1000
        ranked = rows.expand(number, (r.memory.id for r in recalled), results.depth)
        results.add(line.id, ranked, line.relevant, elapsed_ms)
    notes["engine rows"] = len(rows.rows)
    notes["memories merged into an earlier row"] = notes["memories"] - len(rows.rows)
    return results
