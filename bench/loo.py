"""``python -m bench loo A.jsonl B.jsonl ...``: leave-one-dataset-out choice of the gate's share and the query
window. Nothing is chosen on the set it is reported on.

One replay per data set records, for every turn and every query window, what the gate would see: the bot's
best few candidates (the fused top ``GATE_DEPTH`` that pass the floor and the clause-coverage rule) with their
share, and the ungated ranking for hit@k. Any share can then be applied offline, exactly as the engine's gate
applies it (the first ``limit`` candidates in fused order whose share reaches it). For each fold the window
with the best mean hit@1 on the other sets is chosen, then the lowest share at which the bot injects
something on at most ``goal`` of the certified negative turns of every other set; both are reported on the
held-out set beside the gated hit, with the held-out set's own best share for comparison. The replay leaves
out the gate's exception for a distinctive word of the turn that is a memory's keyword (``Query.anchors``):
``bench recall`` measures the gate with it (docs/benchmarks-history.md section 22).
"""

from __future__ import annotations

import asyncio
import pickle
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.dataset import DatasetLine, MemoryLine, QueryLine, read_dataset
from bench.metrics import hit_at_k, recall_at_k
from bench.recall import _RowMap, certified_negative, draft_for, partners
from companion.config.settings import Settings
from companion.core.models import Scope
from companion.ops.engine_assembly import open_engine
from companion.recall.chars import Evidence
from companion.recall.index import GATE_DEPTH, MIN_CLAUSE_COVERAGE
from companion.recall.keywords import KeywordExtractor
from companion.recall.query import build_query
from memory import MemoryEngine

# (earlier user turns, with the companion's last reply): the windows measured.
WINDOWS: dict[str, tuple[int, bool]] = {
    "turn": (0, False), "turn+1": (1, False), "turn+2": (2, False), "turn+reply": (0, True),
    "turn+1+reply": (1, True), "turn+2+reply": (2, True),
}
BOT_LIMIT = 2
DEPTH = 10
# The gate never runs without a share; this admits every candidate that passes the coverage rule.
ANY_SHARE = 1e-9
REFERENCE = 20
MARGINS = (None, 0.0, 0.1, 0.2, 0.3)  # the scope-adaptive rule: share >= the usual share + margin (None: off)
# What the gate compares with its threshold, each computed from the same recorded evidence (``Evidence``): the
# shipped share; the share beyond what one unit alone gives, rescaled (``Evidence.beyond_chance``); the same not
# rescaled. Chosen like the threshold, on the training sets.
RULES: dict[str, Callable[[Evidence], float]] = {
    "share": lambda found: found.share,
    "beyond chance": lambda found: found.beyond_chance(),
    "share - lone": lambda found: max(found.asked - found.asked_lone, found.held - found.held_lone),
}
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 15))  # 0.05 .. 0.7, for every rule


@dataclass
class Turn:
    kind: str  # "positive", "chit-chat", "other user"
    certified: bool  # a negative the data set itself vouches for (always True for positives)
    relevant: tuple[str, ...] = ()
    ranked: dict[str, list[str]] = field(default_factory=dict)  # window -> ungated ranking (positives)
    candidates: dict[str, list[tuple[tuple[str, ...], float]]] = field(default_factory=dict)  # window -> gate input
    # window -> the scope's usual share for this turn: the median share of its first REFERENCE candidates
    reference: dict[str, float] = field(default_factory=dict)
    size: int = 0  # memories (engine rows) in the scope asked
    # window -> per candidate (same order): the gate's evidence and clause coverage on the window, and on the
    # turn alone when the window read more than the turn
    evidence: dict[str, list[tuple[tuple[Evidence, float], tuple[Evidence, float] | None]]] = field(
        default_factory=dict)

    def injected(self, window: str, share: float, limit: int = BOT_LIMIT, margin: float | None = None,
                 rule: str = "share") -> list[str]:
        out: list[str] = []
        admitted = 0
        floor = share if margin is None else max(share, self.reference[window] + margin)
        statistic = RULES[rule]
        for position, (ids, match) in enumerate(self.candidates[window]):
            if self.evidence:  # replayed from the recorded evidence, on the window or the turn alone
                match = self._stat(window, position, statistic)
            if match >= floor and admitted < limit:
                admitted += 1
                out.extend(ids)
        return out

    def _stat(self, window: str, position: int, statistic: Callable[[Evidence], float]) -> float:
        sides = [side for side in self.evidence[window][position] if side is not None]
        return max((statistic(found) for found, cover in sides if cover >= MIN_CLAUSE_COVERAGE), default=0.0)


@dataclass
class Record:
    name: str
    turns: list[Turn] = field(default_factory=list)

    def positives(self) -> list[Turn]:
        return [t for t in self.turns if t.kind == "positive"]

    def ranking(self, window: str) -> dict[str, float]:
        positives = self.positives()
        n = len(positives) or 1
        return {"hit@1": sum(hit_at_k(t.ranked[window], t.relevant, 1) for t in positives) / n,
                "recall@5": sum(recall_at_k(t.ranked[window], t.relevant, 5) for t in positives) / n}

    def gate(self, window: str, share: float, margin: float | None = None, rule: str = "share") -> dict[str, float]:
        positives = self.positives()
        out = {"gated hit": sum(any(i in t.relevant for i in t.injected(window, share, margin=margin, rule=rule))
                                for t in positives) / (len(positives) or 1)}
        for label, turns in (("false injection, other user", [t for t in self.turns if t.kind == "other user"]),
                             ("false injection, chit-chat", [t for t in self.turns if t.kind == "chit-chat"]),
                             ("false injection, certified", [t for t in self.turns
                                                             if t.kind != "positive" and t.certified])):
            if turns:
                out[label] = sum(bool(t.injected(window, share, margin=margin, rule=rule)) for t in turns) / len(
                    turns)
        return out


def _window(line: QueryLine, window: str) -> tuple[tuple[str, ...], str | None]:
    earlier, reply = WINDOWS[window]
    return (line.context[-earlier:] if earlier else ()), (line.reply if reply else None)


async def _candidates(engine: MemoryEngine, scope: Scope, line: QueryLine, window: str, rows: _RowMap,
                      number: int, turn: Turn) -> list[tuple[tuple[str, ...], float]]:
    earlier, reply = _window(line, window)
    # Every one of the gate's first few (gate lifted): the rules and the clause coverage are applied offline.
    found = await engine.recall(scope, line.text, line.time, cooldown=None, earlier=earlier, reply=reply,
                                limit=GATE_DEPTH, min_match=0.0)
    # What the gate reads for each, on the window and on the turn alone, so other gate rules replay offline.
    # The engine keeps its index and query builder to itself: a benchmark may look (read only).
    index = await engine._cache.index(scope)
    query = build_query(line.text, engine._context.query_words, earlier=earlier, reply=reply)
    turn.evidence[window] = [
        (index.evidence(r.memory.id, query), index.evidence(r.memory.id, query.turn) if query.turn else None)
        for r in found]
    return [(tuple(rows.expand(number, [r.memory.id], 10**6)), r.match) for r in found]


async def _reference(engine: MemoryEngine, scope: Scope, line: QueryLine, window: str) -> float:
    earlier, reply = _window(line, window)
    found = await engine.recall(scope, line.text, line.time, cooldown=None, earlier=earlier, reply=reply,
                                limit=None, min_match=ANY_SHARE)
    shares = sorted(r.match for r in found[:REFERENCE])
    return shares[len(shares) // 2] if shares else 0.0


async def _ranked(engine: MemoryEngine, scope: Scope, line: QueryLine, window: str, rows: _RowMap,
                  number: int) -> list[str]:
    earlier, reply = _window(line, window)
    found = await engine.recall(scope, line.text, line.time, limit=None, min_importance=0.0, min_match=0.0,
                                cooldown=None, earlier=earlier, reply=reply)
    return rows.expand(number, [r.memory.id for r in found], DEPTH)


def _windows_for(line: QueryLine) -> dict[str, str]:
    """Each window -> the window whose query is the same for this line (lines without context share one)."""
    out: dict[str, str] = {}
    for window, (earlier, reply) in WINDOWS.items():
        used = (min(earlier, len(line.context)), reply and line.reply is not None)
        out[window] = next((w for w in out if (min(WINDOWS[w][0], len(line.context)),
                                               WINDOWS[w][1] and line.reply is not None) == used), window)
    return out


async def record(name: str, lines: Iterable[DatasetLine]) -> Record:
    out = Record(name)
    with tempfile.TemporaryDirectory(prefix="bench-loo-") as tmp:
        engine = await open_engine(Settings(_env_file=None, data_dir=Path(tmp)),  # type: ignore[call-arg]
                                   KeywordExtractor())
        try:
            await _replay(engine, lines, out)
        finally:
            await engine.close()
    return out


async def _gate_inputs(engine: MemoryEngine, scope: Scope, line: QueryLine, rows: _RowMap, number: int,
                       turn: Turn, ranking: bool) -> None:
    same = _windows_for(line)
    for window, alias in same.items():
        if alias != window:
            turn.candidates[window] = turn.candidates[alias]
            turn.reference[window] = turn.reference[alias]
            turn.evidence[window] = turn.evidence[alias]
            if ranking:
                turn.ranked[window] = turn.ranked[alias]
            continue
        turn.candidates[window] = await _candidates(engine, scope, line, window, rows, number, turn)
        turn.reference[window] = await _reference(engine, scope, line, window)
        if ranking:
            turn.ranked[window] = await _ranked(engine, scope, line, window, rows, number)


async def _replay(engine: MemoryEngine, lines: Iterable[DatasetLine], out: Record) -> None:
    scopes: dict[str, int] = {}
    rows = _RowMap()
    questions: list[QueryLine] = []
    texts: dict[str, set[str]] = {}
    subjects: dict[str, set[str]] = {}
    by_id: dict[tuple[str, str], str] = {}
    sizes: Counter[int] = Counter()
    for line in lines:
        number = scopes.setdefault(line.user, len(scopes) + 1)
        if isinstance(line, MemoryLine):
            texts.setdefault(line.user, set()).add(line.text)
            subjects.setdefault(line.user, set()).update(line.subjects)
            by_id[(line.user, line.id)] = line.text
            for row in (await engine.remember(Scope(number), [draft_for(line)], now=line.time))[:1]:
                sizes[number] += (number, row) not in rows.rows
                rows.add(number, row, line.id)
            continue
        if line.negative:
            turn = Turn("chit-chat", not line.about, size=sizes[number])
        else:
            turn = Turn("positive", True, tuple(line.relevant), size=sizes[number])
            questions.append(line)
        await _gate_inputs(engine, Scope(number), line, rows, number, turn, ranking=not line.negative)
        out.turns.append(turn)
    partner = partners(list(scopes), texts)
    annotated = any(q.subjects for q in questions)
    for line in questions if partner else ():
        other = partner[line.user]
        gold = [by_id[(line.user, r)] for r in line.relevant if (line.user, r) in by_id]
        certified = certified_negative(line, gold, texts.get(other, ()), subjects.get(other, set()), annotated)
        turn = Turn("other user", certified, size=sizes[scopes[other]])
        await _gate_inputs(engine, Scope(scopes[other]), line, rows, scopes[other], turn, ranking=False)
        out.turns.append(turn)


def _worst_fi(record: Record, window: str, share: float, margin: float | None, rule: str = "share") -> float:
    return record.gate(window, share, margin, rule).get("false injection, certified", 0.0)


def choose(train: Sequence[Record], shares: Sequence[float], goal: float,
           margins: Sequence[float | None] = (None,), rules: Sequence[str] = ("share",),
           ) -> tuple[str, float, float | None, str]:
    """The window with the best mean hit@1 over ``train``; then, among the (share, margin, rule) choices at which
    every training set's certified false injection is within ``goal``, the one with the best mean gated hit (the
    one with the lowest worst false injection when none is). The rule is chosen like its threshold: on ``train``."""
    window = max(WINDOWS, key=lambda w: (sum(r.ranking(w)["hit@1"] for r in train), -list(WINDOWS).index(w)))
    choices = [(s, m, g) for g in rules for s in sorted(shares) for m in margins]
    fits = [c for c in choices if all(_worst_fi(r, window, *c) <= goal for r in train)]
    if fits:
        share, margin, rule = max(fits, key=lambda c: sum(r.gate(window, *c)["gated hit"] for r in train))
    else:
        share, margin, rule = min(choices, key=lambda c: max(_worst_fi(r, window, *c) for r in train))
    return window, share, margin, rule


def leave_one_out(records: Sequence[Record], shares: Sequence[float], goal: float,
                  margins: Sequence[float | None] = (None,), rules: Sequence[str] = ("share",)) -> list[dict[str, Any]]:
    folds = []
    for held in records:
        train = [r for r in records if r is not held]
        window, share, margin, rule = choose(train, shares, goal, margins, rules)
        own = choose([held], shares, goal, margins, rules)
        folds.append({
            "held out": held.name, "window": window, "rule": rule, "share": share, "margin": margin,
            **{k: round(v, 4) for k, v in held.ranking(window).items()},
            **{k: round(v, 4) for k, v in held.gate(window, share, margin, rule).items()},
            "held-out set's own choice": {"window": own[0], "share": own[1], "margin": own[2], "rule": own[3],
                                          **{k: round(v, 4) for k, v in held.gate(*own).items()}},
        })
    return folds


def sweep(records: Sequence[Record], shares: Sequence[float]) -> dict[str, Any]:
    """Every set's ranking per window and gate per share (at the default window), for the tables."""
    out: dict[str, Any] = {}
    for record_ in records:
        out[record_.name] = {
            "ranking": {w: {k: round(v, 4) for k, v in record_.ranking(w).items()} for w in WINDOWS},
            "gate": {f"{s:g}": {w: {k: round(v, 4) for k, v in record_.gate(w, s).items()} for w in WINDOWS}
                     for s in shares},
        }
    return out


def run_loo(paths: Sequence[Path], shares: Sequence[float], aim: float, keep: Path | None = None) -> dict[str, Any]:
    """``keep``: also pickle each set's records into this folder, to try other gates on them offline. A path
    ending in .pickle is such a record, read instead of replayed."""
    records = [pickle.loads(path.read_bytes()) if path.suffix == ".pickle" else
               asyncio.run(record(path.stem, read_dataset(path))) for path in paths]
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for record_ in records:
            (keep / f"{record_.name}.pickle").write_bytes(pickle.dumps(record_))
    per_rule = {name: leave_one_out(records, THRESHOLDS, aim, rules=(name,)) for name in RULES}
    return {"aim: false injection each training set keeps to": aim, "fixed share": leave_one_out(records, shares, aim),
            "scope-adaptive": leave_one_out(records, shares, aim, MARGINS),
            "rule chosen on the others": leave_one_out(records, THRESHOLDS, aim, rules=tuple(RULES)),
            "each rule": per_rule, "sets": sweep(records, shares)}


def format_folds(folds: Sequence[Mapping[str, Any]]) -> str:
    rows = ["held out        window          rule           share margin  hit@1  rec@5  gated hit  FI other  "
            "FI certified"]
    for fold in folds:
        margin = "  -  " if fold["margin"] is None else f"{fold['margin']:5.2f}"
        rows.append(f"{fold['held out']:<15} {fold['window']:<15} {fold.get('rule', 'share'):<14} {fold['share']:5.2f} "
                    f"{margin}  {fold['hit@1']:.3f}  "
                    f"{fold['recall@5']:.3f}  {fold['gated hit']:9.3f}  "
                    f"{fold.get('false injection, other user', float('nan')):8.3f}  "
                    f"{fold.get('false injection, certified', float('nan')):12.3f}")
    return "\n".join(rows)
