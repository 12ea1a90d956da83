"""Replays a dataset through each system in file order and scores every query as it comes."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from bench.bm25 import ScopedBM25
from bench.dataset import DatasetLine, MemoryLine
from bench.metrics import MetricsAccumulator
from companion.keywords import KeywordExtractor


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


async def run_engine(lines: Iterable[DatasetLine], ks: Sequence[int]) -> MetricsAccumulator:
    """The memory engine on the same lines: ingest memories, recall top max(ks) for each query."""
    raise NotImplementedError("the engine runner is not written yet")
