"""Metrics, the accumulator's summary, the BM25 baseline and the recall CLI on tiny inputs."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import cli
from bench.bm25 import BM25Index, ScopedBM25
from bench.dataset import MemoryLine, QueryLine, write_dataset
from bench.metrics import InjectionCounts, MetricsAccumulator, hit_at_k, percentile, recall_at_k, reciprocal_rank

RANKED = ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("relevant", "k", "expected"),
    [({"a"}, 1, 1.0), ({"b"}, 1, 0.0), ({"b"}, 2, 1.0), ({"e"}, 5, 1.0), ({"z"}, 5, 0.0),
     ({"c", "z"}, 3, 1.0), ({"e"}, 10, 1.0)],
)
def test_hit_at_k(relevant: set[str], k: int, expected: float) -> None:
    assert hit_at_k(RANKED, relevant, k) == expected


@pytest.mark.parametrize(
    ("relevant", "k", "expected"),
    [({"a"}, 1, 1.0), ({"a", "b"}, 1, 0.5), ({"a", "b"}, 2, 1.0), ({"a", "z"}, 5, 0.5),
     ({"c", "d", "e", "z"}, 4, 0.5), ({"z"}, 5, 0.0), ({"a", "b", "c"}, 10, 1.0)],
)
def test_recall_at_k(relevant: set[str], k: int, expected: float) -> None:
    assert recall_at_k(RANKED, relevant, k) == pytest.approx(expected)


def test_recall_counts_a_repeated_id_once() -> None:
    assert recall_at_k(["a", "a"], {"a", "b"}, 2) == 0.5


@pytest.mark.parametrize(
    ("relevant", "expected"),
    [({"a"}, 1.0), ({"b"}, 0.5), ({"c", "e"}, 1 / 3), ({"e"}, 0.2), ({"z"}, 0.0)],
)
def test_reciprocal_rank(relevant: set[str], expected: float) -> None:
    assert reciprocal_rank(RANKED, relevant) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([5.0], 50, 5.0), ([1.0, 2.0], 50, 1.5), ([3.0, 1.0, 2.0], 50, 2.0), ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
     ([1.0, 2.0, 3.0, 4.0], 0, 1.0), ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
     (list(map(float, range(1, 21))), 95, 19.05), ([10.0, 20.0], 95, 19.5)],
)
def test_percentile_interpolates_linearly(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == pytest.approx(expected)


@pytest.mark.parametrize("bad", [lambda: percentile([], 50), lambda: percentile([1.0], 101),
                                 lambda: hit_at_k(RANKED, {"a"}, 0), lambda: recall_at_k(RANKED, set(), 1)])
def test_invalid_arguments_raise(bad: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        bad()


def test_summary_has_exactly_the_documented_keys_and_values() -> None:
    acc = MetricsAccumulator(ks=(1, 3))
    acc.add("q1", ["a", "b", "c"], {"a"}, 1.0)
    acc.add("q2", ["x", "y", "b"], {"b", "z"}, 3.0)
    acc.add("q3", ["x"], {"a"}, 2.0)
    summary = acc.summary()
    assert list(summary) == ["hit@1", "hit@3", "recall@1", "recall@3", "mrr", "latency_ms"]
    assert summary["hit@1"] == 0.3333
    assert summary["hit@3"] == 0.6667
    assert summary["recall@3"] == 0.5  # (1 + 0.5 + 0) / 3
    assert summary["mrr"] == 0.4444  # (1 + 1/3 + 0) / 3
    assert summary["latency_ms"] == {"p50": 2.0, "p95": 2.9}


def test_default_ks_and_empty_accumulator() -> None:
    acc = MetricsAccumulator()
    with pytest.raises(ValueError):
        acc.summary()
    acc.add("q", ["a"], ["a"], 0.5)
    assert [key for key in acc.summary() if key.startswith("hit@")] == ["hit@1", "hit@2", "hit@5", "hit@10"]
    with pytest.raises(ValueError):
        acc.add("q", ["a"], [], 0.5)


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        ([("positive", ["m1"], ["m1"]), ("positive", ["m2"], ["m1"]), ("positive", [], ["m1"]),
          ("negative", [], []), ("negative", ["m3"], []), ("other user", [], []), ("other user", [], [])],
         {"gated hit": 0.3333, "injects on positive": 0.6667, "false injection, negative": 0.5,
          "negative turns": 2, "false injection, other user": 0.0, "other user turns": 2,
          "false injection": 0.25}),
        ([("positive", ["m1", "m2"], ["m2"])], {"gated hit": 1.0, "injects on positive": 1.0}),
        ([], {}),
    ],
)
def test_injection_counts(turns: list[tuple[str, list[str], list[str]]], expected: dict[str, float]) -> None:
    counts = InjectionCounts()
    for kind, injected, relevant in turns:
        counts.add(kind, injected, relevant)
    assert counts.summary() == expected


def test_bm25_ranks_the_obviously_relevant_document_first() -> None:
    index = BM25Index()
    index.add("weather", ["今天", "天气", "很好", "适合", "散步"])
    index.add("cat", ["我", "的", "猫", "叫", "布玛", "布玛", "很", "可爱"])
    index.add("food", ["晚饭", "吃了", "牛肉面", "味道", "不错"])
    index.add("cat2", ["楼下", "的", "狗", "很", "可爱"])
    hits = index.search(["猫", "布玛"], 3)
    assert [doc_id for doc_id, _ in hits] == ["cat"]
    assert hits[0][1] > 0
    assert [doc_id for doc_id, _ in index.search(["可爱"], 5)] == ["cat2", "cat"]  # shorter doc wins
    assert index.search(["月亮"], 5) == []


def test_bm25_breaks_ties_towards_the_newer_document() -> None:
    index = BM25Index()
    for doc_id in ("old", "middle", "new"):
        index.add(doc_id, ["搬家", "上海"])
    assert [doc for doc, _ in index.search(["搬家"], 3)] == ["new", "middle", "old"]


def test_bm25_matches_the_okapi_formula() -> None:
    index = BM25Index()
    index.add("a", ["x", "y"])
    index.add("b", ["y", "y", "z", "w"])
    avgdl = 3.0
    idf_y = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))
    expected_b = idf_y * 2 * 2.5 / (2 + 1.5 * (1 - 0.75 + 0.75 * 4 / avgdl))
    scores = dict(index.search(["y"], 2))
    assert scores["b"] == pytest.approx(expected_b)


def test_bm25_keeps_scopes_apart_and_is_incremental() -> None:
    index = ScopedBM25()
    index.add("u1", "m1", ["猫", "布玛"])
    index.add("u2", "m1", ["猫", "咪咪"])
    assert index.search("u1", ["咪咪"], 5) == []
    assert [doc for doc, _ in index.search("u2", ["猫"], 5)] == ["m1"]
    assert index.search("nobody", ["猫"], 5) == []
    index.add("u1", "m2", ["咪咪"])
    assert [doc for doc, _ in index.search("u1", ["咪咪"], 5)] == ["m2"]
    with pytest.raises(ValueError):
        index.add("u1", "m2", ["重复"])


def test_bm25_only_scores_documents_that_share_a_term() -> None:
    index = BM25Index()
    for n in range(2000):
        index.add(f"filler{n}", [f"w{n}", "common"])
    index.add("target", ["needle", "common"])
    assert [doc for doc, _ in index.search(["needle"], 10)] == ["target"]
    assert len(index.search(["common"], 10)) == 10


class _BigramTokens:
    """Stands in for jieba (1.3 s to load): character bigrams are enough for a three-line dataset."""

    def load(self) -> None:
        pass

    def tokens(self, text: str) -> list[str]:
        return [text[i:i + 2] for i in range(len(text) - 1)]


def test_recall_command_prints_bm25_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "KeywordExtractor", _BigramTokens)
    when = datetime(2024, 1, 1, tzinfo=UTC)
    dataset = tmp_path / "tiny.jsonl"
    write_dataset(dataset, [
        MemoryLine("u", "m1", when, "我的猫叫布玛"),
        MemoryLine("u", "m2", when, "今天晚饭吃了牛肉面"),
        QueryLine("u", "q1", when, "布玛是谁的猫", ("m1",)),
    ])
    out = tmp_path / "result.json"
    assert cli.main(["recall", str(dataset), "--k", "1,2", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "bm25" in table and "hit@1" in table
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["queries"] == 1
    assert report["bm25"]["hit@1"] == 1.0
    assert set(report) == {"queries", "engine", "bm25", "chars", "injection"}
