"""``python -m bench merge``: the labelled pairs load, both rules are scored, and the metrics are the ones the
verdicts give (computed, not stored)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench import cli
from bench.merge import DEFAULT_PAIRS, Pair, Score, read_pairs, score, splits

KINDS = {"day", "number", "name", "negation", "retelling", "paraphrase", "topic"}


def test_the_labelled_pairs_cover_every_kind() -> None:
    pairs = read_pairs(DEFAULT_PAIRS)
    assert 80 <= len(pairs) <= 200
    assert {p.kind for p in pairs} == KINDS
    assert all(p.same == (p.kind in {"retelling", "paraphrase"}) for p in pairs)
    assert {p.split for p in pairs} == {"tuning", "holdout"}
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)


def test_merge_command_scores_both_rules_on_the_pairs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "merge.json"
    assert cli.main(["merge", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "old (keywords only)" in printed and "new (keywords + differences)" in printed
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report) == {"all", "tuning", "holdout"}
    pairs = read_pairs(DEFAULT_PAIRS)
    for rule in ("old (keywords only)", "new (keywords + differences)"):
        s = report["all"][rule]
        assert s["tp"] + s["fp"] + s["fn"] + s["tn"] == len(pairs)
        assert s["tp"] + s["fn"] == sum(p.same for p in pairs)
        assert s["precision"] == pytest.approx(s["tp"] / (s["tp"] + s["fp"]), abs=5e-4)
        assert s["recall"] == pytest.approx(s["tp"] / (s["tp"] + s["fn"]), abs=5e-4)
        assert sum(s["merged_by_kind"].values()) == s["tp"] + s["fp"]
    old, new = report["all"]["old (keywords only)"], report["all"]["new (keywords + differences)"]
    assert new["precision"] > old["precision"] and new["recall"] >= old["recall"]
    for kind in ("day", "number", "name", "negation"):  # what the new rule is for: no such pair merged
        assert new["merged_by_kind"][kind] == 0 < old["merged_by_kind"][kind] or old["merged_by_kind"][kind] == 0


def test_score_counts_verdicts() -> None:
    pairs = [Pair("a", "b", True, "retelling"), Pair("c", "d", False, "day"), Pair("e", "f", True, "paraphrase"),
             Pair("g", "h", False, "topic")]

    def merges_ab_and_cd(a: str, a_kw: Sequence[str], b: str, b_kw: Sequence[str]) -> bool:
        return {a, b} in ({"a", "b"}, {"c", "d"})

    [(_, s)] = score(pairs, lambda text: [text], {"rule": merges_ab_and_cd}).items()
    assert (s.tp, s.fp, s.fn, s.tn) == (1, 1, 1, 1)
    assert (s.precision, s.recall, s.f1) == (0.5, 0.5, 0.5)
    assert s.merged_by_kind == {"retelling": 1, "day": 1, "paraphrase": 0, "topic": 0}
    assert Score().precision == 0.0 and Score().recall == 0.0
    assert [len(v) for v in splits(pairs).values()] == [4, 4]


def test_a_rule_that_depends_on_order_is_refused() -> None:
    def first_is_a(a: str, a_kw: Sequence[str], b: str, b_kw: Sequence[str]) -> bool:
        return a == "a"

    with pytest.raises(ValueError, match="depends on the order"):
        score([Pair("a", "b", True, "retelling")], lambda text: [text], {"rule": first_is_a})


def test_a_malformed_pairs_file_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "x", "b": "y", "same": true, "kind": "retelling"}\n{"a": "x"}\n', encoding="utf-8")
    assert cli.main(["merge", str(bad)]) == 2
    assert "line 2: not a pair" in capsys.readouterr().err
