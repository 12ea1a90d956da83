"""``python -m bench merge``: how well the merge rule tells "the same fact retold" from "two different facts".

Hand-written Chinese pairs (``bench/data/merge_pairs.jsonl``: ``a``, ``b``, ``same``, ``kind``, ``split``)
that differ in a day, a number, a name or person, a negation, or in topic, next to true retellings
(near-verbatim or with a detail added) and paraphrases. Each rule says whether a pair is one fact (would be
merged into one memory); "same fact" is the positive class. Keywords come from the engine's own
extractor, as for a save the model gave none. The ``tuning`` pairs were written with the rule; the
``holdout`` pairs after it was fixed, and are scored apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.dataset import DatasetError
from companion.core.extraction import same_event, told_alike

DEFAULT_PAIRS = Path(__file__).parent / "data" / "merge_pairs.jsonl"
KEYWORDS = 8

Rule = Callable[[str, Sequence[str], str, Sequence[str]], bool]
RULES: dict[str, Rule] = {"old (keywords only)": told_alike, "new (keywords + differences)": same_event}


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    same: bool
    kind: str
    split: str = "tuning"


@dataclass(slots=True)
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    merged_by_kind: dict[str, int] = field(default_factory=dict)

    def add(self, pair: Pair, merged: bool) -> None:
        self.merged_by_kind[pair.kind] = self.merged_by_kind.get(pair.kind, 0) + merged
        if merged:
            self.tp += pair.same
            self.fp += not pair.same
        else:
            self.fn += pair.same
            self.tn += not pair.same

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def summary(self) -> dict[str, float | int | dict[str, int]]:
        return {"precision": round(self.precision, 3), "recall": round(self.recall, 3), "f1": round(self.f1, 3),
                "tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn, "merged_by_kind": self.merged_by_kind}


def read_pairs(path: Path) -> list[Pair]:
    pairs = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pair = Pair(str(row["a"]), str(row["b"]), bool(row["same"]), str(row["kind"]),
                        str(row.get("split", "tuning")))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise DatasetError(f"{path} line {number}: not a pair ({exc})") from None
        pairs.append(pair)
    if not pairs:
        raise DatasetError(f"{path}: no pairs")
    return pairs


def score(pairs: Iterable[Pair], keywords: Callable[[str], list[str]],
          rules: dict[str, Rule] | None = None) -> dict[str, Score]:
    """Each rule's verdict on every pair, both ways round (a rule must not depend on the order)."""
    scores = {name: Score() for name in (rules or RULES)}
    for pair in pairs:
        a_kw, b_kw = keywords(pair.a), keywords(pair.b)
        for name, rule in (rules or RULES).items():
            merged = rule(pair.a, a_kw, pair.b, b_kw)
            if merged != rule(pair.b, b_kw, pair.a, a_kw):
                raise ValueError(f"{name} depends on the order of {pair.a!r} / {pair.b!r}")
            scores[name].add(pair, merged)
    return scores


def splits(pairs: Sequence[Pair]) -> dict[str, list[Pair]]:
    """Every pair, then each split on its own."""
    found = {"all": list(pairs)}
    for pair in pairs:
        found.setdefault(pair.split, []).append(pair)
    return found


def format_scores(scores: dict[str, Score], pairs: Sequence[Pair], title: str = "") -> str:
    kinds = list(dict.fromkeys(p.kind for p in pairs))
    totals = {k: sum(p.kind == k for p in pairs) for k in kinds}
    head = f"{'rule':<34} {'precision':>9} {'recall':>7} {'F1':>6}  " + "  ".join(f"{k}" for k in kinds)
    lines = [f"{title}{len(pairs)} pairs ({sum(p.same for p in pairs)} the same fact); merged per kind:", head]
    for name, s in scores.items():
        merged = "  ".join(f"{s.merged_by_kind.get(k, 0)}/{totals[k]}".rjust(len(k)) for k in kinds)
        lines.append(f"{name:<34} {s.precision:>9.3f} {s.recall:>7.3f} {s.f1:>6.3f}  {merged}")
    return "\n".join(lines)
