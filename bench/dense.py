"""``python -m bench recall DATASET --embeddings URL``: the dense path against an embeddings endpoint, beside the
keyword engine, in one replay of the dataset, every system with the same query and the same gate treatment.

Three systems: ``engine`` (keyword recall, as the bot runs without a backend), ``dense`` (the memories nearest
in meaning) and ``engine+dense`` (what the bot runs with a backend: both fused by rank). Every system reads the
same query, the turn with its conversation window (the user's earlier turns and the companion's last reply, as
the bot passes them), and is measured twice: its ranking with every gate lifted (hit@k, recall@k, MRR), and
what the bot would inject with the gates on (limit 2): the gated hit on the questions, and the false injection
on every question asked of another user's memories (``bench.recall.partners``), for every data set, and on
those of them the data set certifies as negatives (``bench.recall.certified_negative``: the other scope neither
names the question's own thing nor shares a subject with it), the turns ``bench loo`` holds the keyword gate to.

The dense gate is applied offline to the recorded nearest memories, so one replay measures every policy of
``DENSE_POLICIES`` (an absolute cosine floor, or how far a memory stands out from the scope's usual similarity
to the turn, ``companion.engine.retrievers.standout``); the fused figures are the engine's own fusion of the
recorded keyword candidates and the admitted dense ones. The configured policy also runs live through
``MemoryEngine.recall`` for the fused row's latency. ``python -m bench dense-loo A.json B.json ...`` chooses the
dense policy leave-one-dataset-out from several such runs.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.dataset import DatasetLine, MemoryLine, QueryLine, read_dataset
from bench.metrics import MetricsAccumulator
from bench.recall import _RowMap, certified_negative, draft_for, partners
from bench.timing import latency_summary, write_json
from companion.config.settings import Settings, load_settings
from companion.core.models import Scope
from companion.engine.retrievers import DensePolicy, DenseRetriever, standout
from companion.ops.engine_assembly import open_engine
from companion.recall.fusion import reciprocal_rank_fusion
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

SYSTEMS = ("engine", "dense", "engine+dense")
BOT_LIMIT = 2
WIDE = 20  # the keyword candidates the bot fuses (DensePolicy.depth)
# E5-family models put unrelated text at 0.7-0.8 cosine, so the floors reach up to where they begin to separate.
FLOORS = (0.3, 0.4, 0.5, 0.55, 0.6, 0.7, 0.8, 0.85, 0.9)
STANDOUTS = (1.0, 2.0, 3.0, 4.0, 5.0)
OVER_CHANCE = (0.25, 0.5, 1.0, 1.5, 2.0)
FUSION_WEIGHTS = (0.25, 0.5, 0.75, 1.0)
FUSION_KS = (1.0, 5.0, 20.0, 60.0)  # the fusion's rank constant: 60 is the usual one, smaller favours first places


def _policies() -> dict[str, DensePolicy]:
    out = {f"cosine >= {f:g}": DensePolicy(min_similarity=f, min_standout=0.0) for f in FLOORS}
    out.update({f"z >= {z:g}": DensePolicy(min_similarity=0.0, min_standout=z, by_scope_size=False)
                for z in STANDOUTS})
    out.update({f"z >= chance + {z:g}": DensePolicy(min_similarity=0.0, min_standout=z) for z in OVER_CHANCE})
    return out


DENSE_POLICIES = _policies()


IN_PROCESS = "e5"  # `--embeddings e5`: the bot's default, multilingual-e5-small in this process


def dense_settings(url: str | None, model: str | None, data_dir: Path, local: str | None = None) -> Settings:
    """The operator's embedding settings with this endpoint (or local model folder, or ``IN_PROCESS``); nothing
    else from the environment changes what the engine does."""
    configured = load_settings()
    backend: dict[str, Any] = (
        {"embedding_local_model": local, "embedding_base_url": ""} if local else
        {"embedding_local_model": "", "embedding_base_url": "", "embeddings": "auto"} if url == IN_PROCESS else
        {"embedding_base_url": url, "embedding_model": model or configured.embedding_model or "bge-m3",
         "embedding_local_model": ""})
    return load_settings(
        _env_file=None, data_dir=data_dir, **backend,
        embedding_api_key=configured.embedding_api_key, embedding_dimensions=configured.embedding_dimensions,
        embedding_batch_size=configured.embedding_batch_size,
        embedding_min_similarity=configured.embedding_min_similarity,
        embedding_min_standout=configured.embedding_min_standout,
        # A replay embeds whole scopes at once, on a machine the encoder may share: generous timeouts.
        embedding_timeout_seconds=max(configured.embedding_timeout_seconds, 120.0),
        embedding_query_timeout_seconds=max(configured.embedding_query_timeout_seconds, 30.0),
    )


@dataclass
class Turn:
    """What one turn gives each system, as engine rows, for the offline gates."""

    number: int
    relevant: tuple[str, ...]  # () on a question asked of another user
    certified: bool = True  # on a question asked of another user: a negative the data set vouches for
    ranked: list[int] = field(default_factory=list)  # keyword ranking, gate lifted
    lexical: list[int] = field(default_factory=list)  # keyword candidates past the bot's gate (widened)
    hits: list[tuple[int, float]] = field(default_factory=list)  # nearest memories, closest first
    live: list[int] = field(default_factory=list)  # what the engine with the configured dense gate injects


@dataclass
class Kept:
    """A replay's records (``--keep``): every turn's rankings and nearest memories, to replay rules offline."""

    turns: list[Turn]
    rows: _RowMap
    latency: dict[str, list[float]]
    notes: dict[str, int]
    ks: Sequence[int]

    def _ids(self, turn: Turn, rows: Iterable[int], depth: int) -> list[str]:
        return self.rows.expand(turn.number, rows, depth)

    def systems(self, policy: DensePolicy) -> dict[str, Any]:
        """Each system's ranking (gates lifted), gated hit and false injection under this dense gate."""
        depth = max(self.ks)
        out: dict[str, Any] = {}
        for name in SYSTEMS:
            ranking = MetricsAccumulator(self.ks)
            hit = positives = injected = negatives = certified = injected_certified = 0
            for turn in self.turns:
                gated = self._ids(turn, self.gated(name, turn, policy), 10**6)
                if turn.relevant:
                    positives += 1
                    hit += any(i in turn.relevant for i in gated)
                    ranking.add("q", self._ids(turn, self._ranked(name, turn, policy), depth), turn.relevant, 0.0)
                else:
                    negatives += 1
                    injected += bool(gated)
                    certified += turn.certified
                    injected_certified += bool(gated) and turn.certified
            summary = {k: v for k, v in ranking.summary().items() if k != "latency_ms"} if positives else {}
            summary["gated hit"] = round(hit / (positives or 1), 4)
            summary["false injection, other user"] = round(injected / (negatives or 1), 4)
            summary["false injection, certified"] = round(injected_certified / (certified or 1), 4)
            summary["latency_ms"] = latency_summary(self.latency[name]) if self.latency[name] else {}
            out[name] = summary
        return out

    def _ranked(self, name: str, turn: Turn, policy: DensePolicy) -> list[int]:
        dense = [h for h, _ in turn.hits[: policy.depth]]
        if name == "engine":
            return turn.ranked
        if name == "dense":
            return [h for h, _ in turn.hits]
        return [h for h, _ in reciprocal_rank_fusion([turn.ranked, dense], weights=(1.0, policy.weight),
                                                     k=policy.fusion_k)]

    def gated(self, name: str, turn: Turn, policy: DensePolicy) -> list[int]:
        if name == "engine":
            return turn.lexical[:BOT_LIMIT]
        admitted = [h for h, _ in standout(turn.hits, policy)][: policy.depth]
        if name == "dense":
            return admitted[:BOT_LIMIT]
        if not admitted:
            return turn.lexical[:BOT_LIMIT]
        return [h for h, _ in reciprocal_rank_fusion([turn.lexical, admitted], weights=(1.0, policy.weight),
                                                     k=policy.fusion_k)][:BOT_LIMIT]


class DenseReplay:
    def __init__(self, engine: MemoryEngine, dense: DenseRetriever, ks: Sequence[int]) -> None:
        self.engine = engine
        self.dense = dense
        self.ks = ks
        self.rows = _RowMap()
        self.turns: list[Turn] = []
        self.latency: dict[str, list[float]] = {name: [] for name in SYSTEMS}
        self.notes: Counter[str] = Counter()
        self._scopes: dict[str, int] = {}
        self._texts: dict[str, set[str]] = {}
        self._subjects: dict[str, set[str]] = {}
        self._by_id: dict[tuple[str, str], str] = {}
        self._unembedded: set[int] = set()

    async def run(self, lines: Iterable[DatasetLine]) -> None:
        questions: list[QueryLine] = []
        for line in lines:
            number = self._scopes.setdefault(line.user, len(self._scopes) + 1)
            if isinstance(line, MemoryLine):
                # Embedded in one batch before this user's next query.
                written = await self.engine.remember(Scope(number), [draft_for(line)], now=line.time, embed=False)
                for handle in written[:1]:
                    self.rows.add(number, handle, line.id)
                self._texts.setdefault(line.user, set()).add(line.text)
                self._subjects.setdefault(line.user, set()).update(line.subjects)
                self._by_id[(line.user, line.id)] = line.text
                self._unembedded.add(number)
                self.notes["memories"] += 1
                continue
            await self._sync(number, line.time)
            if line.negative:
                continue  # the other-user turns are every set's negatives
            questions.append(line)
            self.turns.append(await self._turn(number, line, tuple(line.relevant)))
        partner = partners(list(self._scopes), self._texts)
        annotated = any(q.subjects for q in questions)
        for line in questions if partner else ():
            other = self._scopes[partner[line.user]]
            await self._sync(other, line.time)
            turn = await self._turn(other, line, ())
            gold = [self._by_id[(line.user, r)] for r in line.relevant if (line.user, r) in self._by_id]
            turn.certified = certified_negative(line, gold, self._texts.get(partner[line.user], ()),
                                                self._subjects.get(partner[line.user], set()), annotated)
            self.turns.append(turn)

    async def _sync(self, number: int, at: datetime) -> None:
        if number in self._unembedded:
            started = time.perf_counter()
            self.notes["vectors written"] += await self.dense.sync(Scope(number), at, limit=1_000_000)
            self.notes["embedding ms (writes)"] += round((time.perf_counter() - started) * 1000)
            self._unembedded.discard(number)

    async def _turn(self, number: int, line: QueryLine, relevant: tuple[str, ...]) -> Turn:
        scope, engine = Scope(number), self.engine
        turn = Turn(number, relevant)
        window: dict[str, Any] = {"earlier": line.context, "reply": line.reply}
        engine.dense = None
        turn.ranked = [r.memory.id for r in await engine.recall(
            scope, line.text, line.time, limit=None, min_importance=0.0, min_match=0.0, cooldown=None, **window)]
        started = time.perf_counter()
        bot = await engine.recall(scope, line.text, line.time, cooldown=None, **window)
        self.latency["engine"].append((time.perf_counter() - started) * 1000)
        turn.lexical = [r.memory.id for r in await engine.recall(scope, line.text, line.time, limit=WIDE,
                                                                   cooldown=None, **window)]
        self.notes["keyword bot path equals the widened cut"] += [r.memory.id for r in bot] == turn.lexical[:BOT_LIMIT]
        started = time.perf_counter()
        turn.hits = await self.dense.nearest(scope, line.text, self.dense.policy.standout_sample, **window)
        self.latency["dense"].append((time.perf_counter() - started) * 1000)
        engine.dense = self.dense
        started = time.perf_counter()
        turn.live = [r.memory.id for r in await engine.recall(scope, line.text, line.time, cooldown=None, **window)]
        self.latency["engine+dense"].append((time.perf_counter() - started) * 1000)
        return turn

    def systems(self, policy: DensePolicy) -> dict[str, Any]:
        return self.kept().systems(policy)

    def kept(self) -> Kept:
        """What the offline rules read, without the engine."""
        return Kept(self.turns, self.rows, dict(self.latency), dict(self.notes), self.ks)

    def agrees_with_live(self) -> float:
        """Share of turns on which the offline fusion under the configured policy equals the engine's own."""
        policy = self.dense.policy
        kept = self.kept()
        same = sum(kept.gated("engine+dense", t, policy) == t.live for t in self.turns)
        return round(same / (len(self.turns) or 1), 4)


async def replay_dense(lines: Iterable[DatasetLine], ks: Sequence[int], url: str | None, model: str | None,
                       local: str | None = None) -> DenseReplay:
    with tempfile.TemporaryDirectory(prefix="bench-dense-") as tmp:
        settings = dense_settings(url, model, Path(tmp), local)
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
    local = args.embeddings if Path(args.embeddings).is_dir() else None
    replay = asyncio.run(replay_dense(read_dataset(args.dataset), args.k, None if local else args.embeddings,
                                      args.embedding_model, local))
    if replay.dense.available is False:
        print("the embedding backend failed during the run: dense numbers are partial", file=sys.stderr)
    count = sum(1 for t in replay.turns if t.relevant)
    if count == 0:
        print(f"{args.dataset}: no queries", file=sys.stderr)
        return 2
    print("dense run: " + ", ".join(f"{k} {v}" for k, v in sorted(replay.notes.items())), file=sys.stderr)
    policy = replay.dense.policy
    print(f"{count} queries, {len(replay.turns) - count} asked of another user; model {replay.dense.model}, "
          f"dense gate: cosine >= {policy.min_similarity:g}, standout >= {policy.min_standout:g} "
          f"(EMBEDDING_MIN_SIMILARITY, EMBEDDING_MIN_STANDOUT); vectors scored by {replay.dense.vectors.backend}")
    report = summarise(replay.kept(), policy, replay.dense.model)
    report["offline fusion equals the engine's"] = replay.agrees_with_live()
    if args.json:
        write_json(args.json, report)
    if getattr(args, "keep", None):
        args.keep.write_bytes(pickle.dumps(replay.kept()))
    return 0


def _cells(row: Mapping[str, Any]) -> str:
    return (f"{row['gated hit']:.3f} / {row['false injection, other user']:.3f} / "
            f"{row.get('false injection, certified', float('nan')):.3f}")


def summarise(kept: Kept, policy: DensePolicy, model: str) -> dict[str, Any]:
    """Every system under ``policy``, the dense gate sweep and the fusion sweep, printed and as a report."""
    from bench.cli import format_table

    configured = kept.systems(policy)
    print(format_table(configured))
    sweep = {name: kept.systems(p) for name, p in DENSE_POLICIES.items()}
    weights = {f"{w:g}": kept.systems(replace(policy, weight=w))["engine+dense"] for w in FUSION_WEIGHTS}
    fusion = {f"k {k:g}, weight {w:g}": kept.systems(replace(policy, weight=w, fusion_k=k))["engine+dense"]
              for k in FUSION_KS for w in FUSION_WEIGHTS}
    print("fusion (rank constant k, dense weight): " + "; ".join(
        f"{name}: hit@1 {v['hit@1']:.3f}, recall@5 {v['recall@5']:.3f}, gated hit {v['gated hit']:.3f}"
        for name, v in fusion.items()))
    print("dense gate              dense gated hit / FI all / certified    engine+dense gated hit / FI all / certified")
    for name, systems in sweep.items():
        d, f = systems["dense"], systems["engine+dense"]
        print(f"{name:<22}  {_cells(d)}          {_cells(f)}")
    return {"queries": sum(1 for t in kept.turns if t.relevant), "model": model, **configured,
            "policy": {"min_similarity": policy.min_similarity, "min_standout": policy.min_standout,
                       "weight": policy.weight, "fusion_k": policy.fusion_k},
            "dense gate sweep": sweep, "fusion weight sweep": weights, "fusion sweep": fusion,
            "notes": dict(kept.notes)}


def negatives_key(reports: Iterable[Mapping[str, Any]]) -> str:
    """The false injection the dense gate is held to: on the certified other-user turns, as ``bench loo`` holds
    the keyword gate, when every run counted them (runs recorded before they were counted: every such turn)."""
    certified = all("false injection, certified" in row["engine+dense"]
                    for r in reports for row in r["dense gate sweep"].values())
    return "false injection, certified" if certified else "false injection, other user"


def choose_policy(train: Sequence[Mapping[str, Any]], goal: float, also: Sequence[Mapping[str, Any]] = ()) -> str:
    """The policy with the best mean fused gated hit among those whose fused false injection (``negatives_key``)
    is within ``goal`` on every training set (the one with the lowest worst false injection when none is)."""
    key = negatives_key((*train, *also))

    def worst(name: str) -> float:
        return max(float(r["dense gate sweep"][name]["engine+dense"][key]) for r in train)

    def gain(name: str) -> float:
        return sum(float(r["dense gate sweep"][name]["engine+dense"]["gated hit"]) for r in train)

    # Runs recorded before a policy was added lack it: only the policies every run (``also``: the held-out one)
    # measured compete.
    known = [name for name in DENSE_POLICIES if all(name in r["dense gate sweep"] for r in (*train, *also))]
    fits = [name for name in known if worst(name) <= goal]
    return max(fits, key=gain) if fits else min(known, key=worst)


def choose_fusion(train: Sequence[Mapping[str, Any]]) -> str:
    """The fusion (rank constant, dense weight) with the best mean hit@1 of the fused ranking over ``train``
    (recall@5 breaks ties)."""
    def score(name: str) -> tuple[float, float]:
        return (sum(float(r["fusion sweep"][name]["hit@1"]) for r in train),
                sum(float(r["fusion sweep"][name]["recall@5"]) for r in train))

    names: list[str] = list(train[0]["fusion sweep"])
    return max(names, key=score)


def _report(path: Path) -> dict[str, Any]:
    """A ``recall --embeddings --json`` report, or one made from a replay's records (``--keep``, .pickle) under
    the default dense policy, so a new fusion or gate is measured without embedding again."""
    import json

    if path.suffix == ".pickle":
        print(f"{path.stem}:")
        return summarise(pickle.loads(path.read_bytes()), DensePolicy(), path.stem)
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def run_dense_loo_command(args: argparse.Namespace) -> int:
    reports = {path.stem: _report(path) for path in args.results}
    folds = []
    print("held out            chosen on the others   fused gated hit / FI all / certified   dense (same)   "
          "keywords (same)")
    for held, report in reports.items() if len(reports) > 1 else ():
        name = choose_policy([r for k, r in reports.items() if k != held], args.goal, also=[report])
        row = report["dense gate sweep"][name]
        folds.append({"held out": held, "policy": name, **{s: row[s] for s in SYSTEMS}})
        cells = "   ".join(_cells(row[s]) for s in ("engine+dense", "dense", "engine"))
        print(f"{held:<18}  {name:<21}  {cells}")
    fusion_folds = []
    if all("fusion sweep" in r for r in reports.values()) and len(reports) > 1:
        print("held out            fusion chosen on the others   fused hit@1 / recall@5 / recall@10   "
              "keywords              dense")
        for held, report in reports.items():
            name = choose_fusion([r for k, r in reports.items() if k != held])
            fused = report["fusion sweep"][name]
            fusion_folds.append({"held out": held, "fusion": name, "engine+dense": fused,
                                 "engine": report["engine"], "dense": report["dense"]})
            cells = "   ".join(f"{row['hit@1']:.3f} / {row['recall@5']:.3f} / {row['recall@10']:.3f}"
                               for row in (fused, report["engine"], report["dense"]))
            print(f"{held:<18}  {name:<28}  {cells}")
    if args.json:
        write_json(args.json, {"goal": args.goal, "goal on": negatives_key(reports.values()), "folds": folds,
                               "fusion folds": fusion_folds})
    return 0
