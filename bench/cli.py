"""``python -m bench convert|recall|merge|scale|bot|cost|followups|plots ...``.

The scale, bot and cost benchmarks are imported only when asked for: they pull in aiogram, the fake
servers and the bot's composition root, which ``recall`` does not need.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.convert import (
    ConvertStats,
    convert_dulemon,
    convert_kdconv,
    convert_locomo,
    convert_memdaily,
    write_converted,
)
from bench.convert.memdaily import find_dulemon
from bench.dataset import DatasetError, read_dataset
from bench.metrics import DEFAULT_KS, InjectionCounts, Summary
from bench.recall import breakdown, run_bm25, run_chars, run_engine
from bench.servercli import SERVER_COMMANDS, add_server_commands, lazy
from bench.timing import write_json
from companion.recall.keywords import KeywordExtractor


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--k wants comma-separated integers, got {text!r}") from exc
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError("--k wants positive integers")
    return tuple(ks)


def _shares(text: str) -> tuple[float, ...]:
    try:
        shares = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from exc
    if not shares or any(not 0 <= s <= 1 for s in shares):
        raise argparse.ArgumentTypeError("shares lie within 0..1")
    return shares


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Offline memory-recall benchmark.")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_convert(commands.add_parser("convert", help="convert a public benchmark to dataset JSON lines"))
    recall = commands.add_parser("recall", help="score the engine, BM25 and the character index on a dataset")
    recall.add_argument("dataset", type=Path)
    recall.add_argument("--k", type=parse_ks, default=DEFAULT_KS, help="cut-offs, e.g. 1,2,5,10")
    recall.add_argument("--json", type=Path, help="also write the results here")
    recall.add_argument("--by-group", action="store_true",
                        help="also print hit@1, hit@2 and recall@5 per LoCoMo category or MemDaily file")
    recall.add_argument("--embeddings", metavar="URL",
                        help="measure the dense path against this OpenAI-compatible embeddings endpoint, a "
                             "local sentence-transformers model folder, or e5 (the in-process default model)")
    recall.add_argument("--embedding-model", help="model name for --embeddings (default: EMBEDDING_MODEL)")
    recall.add_argument("--keep", type=Path, metavar="FILE",
                        help="with --embeddings: also pickle the turn records here, to try fusion rules offline")
    recall.add_argument("--gate-sweep", type=_shares, metavar="SHARES",
                        help="calibrate the gate: gated hit and false injection at each minimum share, "
                             "e.g. 0.2,0.3,0.4")
    recall.add_argument("--newest-only", type=_positive, metavar="N",
                        help="the bot may recall only each scope's N newest memories (a tier filter that "
                             "limited a reply to the 2 newest short-term ones; for comparison)")
    loo = commands.add_parser("loo", help="leave-one-dataset-out choice of the gate's share and the query window")
    loo.add_argument("datasets", type=Path, nargs="+", help="JSONL data sets, or records kept by --keep (.pickle)")
    loo.add_argument("--shares", type=_shares, default=(0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7))
    loo.add_argument("--goal", type=float, default=0.10, help="false injection allowed on certified negatives")
    loo.add_argument("--aim", type=float, help="false injection each training set must keep to when a threshold is "
                     "chosen (default: the goal; lower leaves a margin for a held-out set stricter than its others)")
    loo.add_argument("--json", type=Path, help="also write the results here")
    loo.add_argument("--keep", type=Path, metavar="DIR", help="also pickle the turn records here (local use)")
    dense_loo = commands.add_parser("dense-loo", help="leave-one-dataset-out choice of the dense gate from "
                                                      "several `recall --embeddings --json` results")
    dense_loo.add_argument("results", type=Path, nargs="+")
    dense_loo.add_argument("--goal", type=float, default=0.10,
                           help="false injection allowed on certified other-user turns")
    dense_loo.add_argument("--json", type=Path, help="also write the results here")
    merge = commands.add_parser("merge", help="precision and recall of 'same fact' for the old and new merge rules")
    merge.add_argument("pairs", type=Path, nargs="?", default=None, help="pairs (default bench/data/merge_pairs.jsonl)")
    merge.add_argument("--json", type=Path, help="also write the results here")
    latency = commands.add_parser("recall-latency", help="recall p50/p95 per turn for one user of N memories")
    latency.add_argument("--sizes", type=parse_ks, default=(100, 10_000), help="memories, e.g. 100,10000")
    latency.add_argument("--turns", type=_positive, default=2000)
    latency.add_argument("--seed", type=int, default=7)
    latency.add_argument("--json", type=Path, help="also write the results here")
    vectors = commands.add_parser("vector-search", help="one nearest-vector search per scorer, scopes of N vectors")
    vectors.add_argument("--sizes", type=parse_ks, default=(1000, 10_000), help="vectors, e.g. 1000,10000")
    vectors.add_argument("--dim", type=_positive, default=1024)
    vectors.add_argument("--searches", type=_positive, default=20)
    vectors.add_argument("--seed", type=int, default=7)
    vectors.add_argument("--encode", type=int, default=0, metavar="N",
                         help="also time the in-process model encoding N synthetic memories")
    vectors.add_argument("--json", type=Path, help="also write the results here")
    scale = commands.add_parser("scale", help="database size, recall/write latency, decay and backup at scale")
    scale.add_argument("--users", type=_positive, default=10_000)
    scale.add_argument("--per-user", type=_positive, default=100)
    scale.add_argument("--big-user", type=_positive, default=10_000, help="memories of the one heavy user")
    scale.add_argument("--turns", type=_positive, default=1000, help="recall samples per kind of user")
    scale.add_argument("--writes", type=_positive, default=200, help="remember() samples per kind of user")
    scale.add_argument("--seed", type=int, default=7)
    scale.add_argument("--in-process", action="store_true", help="build the data set in this process (faster "
                       "to start; the peak memory then includes the loader)")
    scale.add_argument("--json", type=Path, help="also write the results here")
    scale.add_argument("--database-url", default="", help="a postgresql:// server to measure instead of SQLite "
                       "(the run works in a schema of its own, dropped at the end)")
    bot = commands.add_parser("bot", help="throughput of the real bot against fake Telegram and LLM servers")
    bot.add_argument("--users", type=_positive, default=1000)
    bot.add_argument("--messages", type=_positive, default=20, help="messages per user")
    bot.add_argument("--repeat", type=_positive, default=1, help="runs; the median by throughput is reported")
    bot.add_argument("--parts", action="store_true", help="also measure the CPU of each part of a turn")
    bot.add_argument("--baseline", action="store_true",
                     help="also run an echo bot through the same aiogram path and a plain chat bot without memory "
                     "on the same libraries, alternating with the companion")
    bot.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto",
                     help="the bot's event loop, as EVENT_LOOP sets it for bot.py (both sides of --baseline)")
    bot.add_argument("--json", type=Path, help="also write the results here")
    cost = commands.add_parser("cost", help="LLM calls and prompt sizes of a scripted 200-turn conversation")
    cost.add_argument("--turns", type=_positive, help="default: the script's length (200 for the day)")
    cost.add_argument("--script", choices=("day", "second-facts"), default="day",
                      help="the 200-turn day, or a 60-turn evening that tells second facts on known topics")
    cost.add_argument("--json", type=Path, help="also write the results here")
    cost.add_argument("--tools", action="store_true", help="offer the memory tools in reply calls")
    cost.add_argument("--requests", type=Path, help="also write every request body here, one JSON per line")
    cost.add_argument("--shares-of", type=Path, metavar="FILE",
                      help="only print the prompt-cache shares of request bodies recorded with --requests")
    astrbot = commands.add_parser("astrbot", help="the AstrBot plugin's start-up, hook and memory costs")
    astrbot.add_argument("--rounds", type=_positive, default=3)
    astrbot.add_argument("--json", type=Path, help="also write the results here")
    dida = commands.add_parser("dida", help="Dida365 kanban: requests per poll and change, first push and poll "
                                            "round of many users against the rate limit, reply latency beside it")
    dida.add_argument("--users", type=_positive, default=20, help="users measured against the fake")
    dida.add_argument("--memories", type=_positive, default=200, help="memories per user")
    dida.add_argument("--project-users", type=_positive, default=1000, help="users of the projection")
    dida.add_argument("--latency-ms", type=float, default=150.0, help="the real service's round trip, assumed")
    dida.add_argument("--concurrency", type=_positive, default=8, help="users synced at once")
    dida.add_argument("--json", type=Path, help="also write the results here")
    board = commands.add_parser("board", help="the memory board: server time and bytes of a board of 200 memories "
                                              "beside a plain JSON dump")
    board.add_argument("--memories", type=_positive, default=200)
    board.add_argument("--other-users", type=_positive, default=1000)
    board.add_argument("--rounds", type=_positive, default=60)
    board.add_argument("--json", type=Path, help="also write the results here")
    followups = commands.add_parser("followups", help="the follow-up round over many users: its one read of "
                                                      "what is due beside a scan per user")
    followups.add_argument("--users", type=_positive, default=10_000)
    followups.add_argument("--per-user", type=_positive, default=200)
    followups.add_argument("--rounds", type=_positive, default=7)
    followups.add_argument("--database-url", default="", help="a postgresql:// server instead of SQLite")
    followups.add_argument("--json", type=Path, help="also write the results here")
    plots = commands.add_parser("plots", help="draw the PNG charts from the JSON results")
    plots.add_argument("--results", type=Path, default=Path("bench/results"))
    add_server_commands(commands)
    path = commands.add_parser("path", help="one private message through the bot: the project files it passes "
                                            "and its returns to a higher layer")
    path.add_argument("--embeddings", choices=("auto", "off"), default="off",
                      help="semantic recall as EMBEDDINGS sets it (default off: the path, not the model)")
    path.add_argument("--json", type=Path, help="also write the full report here")
    path.add_argument("--list", action="store_true", help="print the files by layer and every call down the layers")
    return parser


def _add_convert(convert: argparse.ArgumentParser) -> None:
    sources = convert.add_subparsers(dest="source", required=True)
    locomo = sources.add_parser("locomo", help="LoCoMo locomo10.json")
    locomo.add_argument("--mode", choices=["turns", "observations"], default="turns")
    memdaily = sources.add_parser("memdaily", help="MemDaily messages_and_QAs folder or one file of it")
    memdaily.add_argument("--min-candidates", type=int, default=100,
                          help="pad every scope with distractors up to this many memories")
    memdaily.add_argument("--seed", type=int, default=7)
    memdaily.add_argument("--files", default="*.json", help="glob inside the folder")
    memdaily.add_argument("--dulemon", type=Path,
                          help="DuLeMon samples.json for distractor sentences (default: found beside SRC)")
    sources.add_parser("dulemon", help="DuLeMon samples.json")
    kdconv = sources.add_parser("kdconv", help="KdConv: a fetched git snapshot (or a folder holding data/)")
    kdconv.add_argument("--split", default="test", choices=["train", "dev", "test"])
    kdconv.add_argument("--domains", default="film,music,travel", help="comma-separated: film, music, travel")
    for sub in (locomo, memdaily, sources.choices["dulemon"], kdconv):
        sub.add_argument("src", type=Path)
        sub.add_argument("out", type=Path)
        sub.add_argument("--limit", type=_positive, help="only the first N samples/trajectories/sessions "
                                                         "(per file for MemDaily)")


def run_convert(args: argparse.Namespace) -> int:
    stats = ConvertStats()
    if args.source == "locomo":
        lines = convert_locomo(args.src, args.mode, stats, args.limit)
        title = f"locomo ({args.mode})"
    elif args.source == "memdaily":
        dulemon = args.dulemon or find_dulemon(args.src)
        if dulemon is None:
            print("no DuLeMon samples.json found: synthetic distractors only", file=sys.stderr)
        lines = convert_memdaily(args.src, stats, min_candidates=args.min_candidates, seed=args.seed,
                                 limit=args.limit, pattern=args.files, dulemon=dulemon)
        title = "memdaily"
    elif args.source == "kdconv":
        domains = [d for d in args.domains.split(",") if d.strip()]
        lines = convert_kdconv(args.src, stats, args.limit, domains=domains, split=args.split)
        title = f"kdconv ({args.split})"
    else:
        lines = convert_dulemon(args.src, stats, args.limit)
        title = "dulemon"
    write_converted(lines, args.out, stats, f"{title} -> {args.out}")
    return 0


def format_table(systems: dict[str, Summary]) -> str:
    """One row per system; columns in summary order with latency flattened to p50/p95 ms."""
    rows = {name: _flatten(summary) for name, summary in systems.items()}
    columns = list(next(iter(rows.values())))
    width = max(len(name) for name in rows) + 2
    header = "system".ljust(width) + "".join(column.rjust(11) for column in columns)
    body = [name.ljust(width) + "".join(f"{row[c]:11.4f}" for c in columns) for name, row in rows.items()]
    return "\n".join([header, *body])


def format_groups(groups: dict[str, dict[str, Summary]]) -> str:
    metrics = ("hit@1", "hit@2", "recall@5")
    names = list(next(iter(groups.values())))
    width = max(len(name) for name in groups) + 2
    head = "group".ljust(width) + "     n" + "".join(f"{s} {m}".rjust(17) for s in names for m in metrics)
    rows = [head]
    for name, systems in groups.items():
        flat = {s: _flatten(summary) for s, summary in systems.items()}
        cells = "".join(f"{flat[s].get(m, 0.0):17.3f}" for s in names for m in metrics)
        rows.append(f"{name.ljust(width)}{int(flat['engine']['queries']):6d}{cells}")
    return "\n".join(rows)


def _flatten(summary: Summary) -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            flat.update({f"{name} ms": number for name, number in value.items()})
        else:
            flat[key] = value
    return flat


def format_injections(counts: InjectionCounts) -> str:
    summary = counts.summary()
    return "bot gate (limit, floor, min share): " + ", ".join(
        f"{name} {value:.3f}" if isinstance(value, float) else f"{name} {value}" for name, value in summary.items()
    )


def run_recall(args: argparse.Namespace) -> int:
    if args.embeddings:
        from bench.dense import run_dense_command

        return run_dense_command(args)
    extractor = KeywordExtractor()
    extractor.load()
    bm25 = run_bm25(read_dataset(args.dataset), args.k, extractor)
    if bm25.count == 0:
        print(f"{args.dataset}: no queries", file=sys.stderr)
        return 2
    chars = run_chars(read_dataset(args.dataset), args.k)
    notes: Counter[str] = Counter()
    injections = InjectionCounts()
    engine = asyncio.run(run_engine(read_dataset(args.dataset), args.k, notes=notes, injections=injections,
                                    newest_only=args.newest_only))
    if engine.count != bm25.count:
        print(f"engine scored {engine.count} queries, BM25 {bm25.count}", file=sys.stderr)
        return 2
    print("engine writes: " + ", ".join(f"{name} {n}" for name, n in sorted(notes.items())), file=sys.stderr)
    systems = {"engine": engine.summary(), "bm25": bm25.summary(), "chars": chars.summary()}
    print(f"{bm25.count} queries")
    print(format_table(systems))
    print(format_injections(injections))
    if args.by_group:
        print(format_groups(breakdown(read_dataset(args.dataset),
                                      {"engine": engine, "bm25": bm25, "chars": chars}, args.k)))
    report = {"queries": bm25.count, **systems, "injection": injections.summary()}
    if args.gate_sweep:
        report["gate_sweep"] = _gate_sweep(args)
    if args.json:
        write_json(args.json, report)
    return 0


def _gate_sweep(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The gate's trade-off: what the gated bot injects on positive and negative turns at each share."""
    out: dict[str, dict[str, float]] = {}
    for share in args.gate_sweep:
        counts = InjectionCounts()
        asyncio.run(run_engine(read_dataset(args.dataset), (1,), injections=counts, min_match=share))
        out[f"{share:g}"] = counts.summary()
        print(f"min share {share:g}: " + format_injections(counts).partition(": ")[2])
    return out


def run_loo_command(args: argparse.Namespace) -> int:
    from bench.loo import format_folds, run_loo

    report = run_loo(args.datasets, args.shares, args.goal if args.aim is None else args.aim, args.keep)
    print("fixed share:")
    print(format_folds(report["fixed share"]))
    print("scope-adaptive (share >= the scope's usual share for the turn + margin):")
    print(format_folds(report["scope-adaptive"]))
    print("the gate's rule and threshold chosen on the others (rules: " + ", ".join(report["each rule"]) + "):")
    print(format_folds(report["rule chosen on the others"]))
    for name, folds in report["each rule"].items():
        print(f"rule {name!r} alone, its threshold chosen on the others:")
        print(format_folds(folds))
    if args.json:
        write_json(args.json, report)
    return 0


def _dense_loo(args: argparse.Namespace) -> int:
    from bench.dense import run_dense_loo_command

    return run_dense_loo_command(args)


def run_latency_command(args: argparse.Namespace) -> int:
    from bench.recall import run_latency

    report = asyncio.run(run_latency(args.sizes, args.turns, args.seed))
    for size, figures in report["sizes"].items():
        cpu = figures["cpu"]
        print(f"{size:>6} memories: p50 {figures['p50']:.3f} ms, p95 {figures['p95']:.3f} ms "
              f"(CPU p50 {cpu['p50']:.3f}, p95 {cpu['p95']:.3f} ms), "
              f"recalled per turn {figures['recalled_per_turn']:.2f}")
    print(f"load average (1 min) at the end: {report['machine']['loadavg_1m_at_end']}")
    if args.json:
        write_json(args.json, report)
    return 0


def run_vector_search_command(args: argparse.Namespace) -> int:
    from bench.vectorsearch import run_encode, run_vector_search

    report = asyncio.run(run_vector_search(args.sizes, args.dim, args.searches, 20, args.seed))
    for size, measured in report["sizes"].items():
        print(f"{size:>6} vectors: {measured['bytes_per_vector']} bytes on disk a vector")
        for name, figures in measured["scorers"].items():
            print(f"{size:>6} vectors, {name}: p50 {figures['p50']:.2f} ms, p95 {figures['p95']:.2f} ms "
                  f"(CPU p50 {figures['cpu']['p50']:.2f}, p95 {figures['cpu']['p95']:.2f} ms)")
    if args.encode > 0:
        encoded = asyncio.run(run_encode(args.encode, args.seed))
        report["encode"] = encoded
        print("encoding: the in-process model is not installed here" if encoded is None else
              f"encoding {encoded['memories']} memories ({encoded['mean_chars']} characters on average): "
              f"{encoded['wall_ms_per_memory']} ms a memory ({encoded['cpu_ms_per_memory']} ms of CPU); "
              f"1,000,000 memories: {encoded['hours_per_million_one_core']} hours on one core")
    print(f"load average (1 min) at the end: {report['machine']['loadavg_1m_at_end']}")
    if args.json:
        write_json(args.json, report)
    return 0


def run_scale_command(args: argparse.Namespace) -> int:
    from bench.scale import ScaleConfig, format_scale, run_scale

    config = ScaleConfig(users=args.users, per_user=args.per_user, big_user=args.big_user, turns=args.turns,
                         writes=args.writes, seed=args.seed, isolate=not args.in_process,
                         database_url=args.database_url)
    report = asyncio.run(run_scale(config))
    print(format_scale(report))
    if args.json:
        write_json(args.json, report)
    return 0


def run_bot_command(args: argparse.Namespace) -> int:
    from bench.botdriver import BotConfig
    from bench.botload import format_baseline, format_bot, median_run, run_bot_bench
    from companion.config.runtime import run

    config = BotConfig(users=args.users, messages=args.messages)
    runs: list[dict[str, Any]] = []
    baselines: dict[str, list[dict[str, Any]]] = {"plain": [], "echo": []}
    for _ in range(args.repeat):  # alternating, so all see the same machine
        runs.append(run(run_bot_bench(config), args.loop))
        if args.baseline:
            for kind, kept in baselines.items():
                kept.append(run(run_bot_bench(config, bot=kind), args.loop))
    report = median_run(runs)
    print(format_bot(report))
    for kind, kept in baselines.items():
        if kept:
            report[f"{kind}_baseline"] = median_run(kept)
            print(format_baseline(report, report[f"{kind}_baseline"], kind))
    if args.parts:
        from bench.botparts import format_parts, measure_parts

        report["parts_cpu_ms"] = asyncio.run(measure_parts())
        print(format_parts(report["parts_cpu_ms"]))
    if args.json:
        write_json(args.json, report)
    return 0 if report["exactly_one_answer_each"] else 1


def run_cost_command(args: argparse.Namespace) -> int:
    from bench.cost import CostConfig, format_cache, format_cost, run_cost, shares_of

    if args.shares_of:
        lines = args.shares_of.read_text(encoding="utf-8").splitlines()
        summary = shares_of([json.loads(line) for line in lines if line.strip()])
        print("\n".join(format_cache(summary)))
        if args.json:
            write_json(args.json, summary)
        return 0
    from bench.script_zh import FACTS, SECOND_FACTS, SECOND_NEWS, SECOND_TURNS, TURNS

    turns, facts, news = (SECOND_TURNS, SECOND_FACTS, SECOND_NEWS) if args.script == "second-facts" else \
        (TURNS, FACTS, ())
    bodies: list[dict[str, Any]] = []
    config = CostConfig(turns=args.turns or len(turns), tools=args.tools)
    report = asyncio.run(run_cost(config, turns, facts, record=bodies, news=news))
    print(format_cost(report))
    if args.requests:
        args.requests.write_text("".join(json.dumps(b, ensure_ascii=False) + "\n" for b in bodies), encoding="utf-8")
    if args.json:
        write_json(args.json, report)
    return 0


def run_merge_command(args: argparse.Namespace) -> int:
    from bench.merge import DEFAULT_PAIRS, KEYWORDS, format_scores, read_pairs, score, splits

    extractor = KeywordExtractor()
    extractor.load()
    report: dict[str, Any] = {}
    for name, pairs in splits(read_pairs(args.pairs or DEFAULT_PAIRS)).items():
        scores = score(pairs, lambda text: extractor.keywords(text, limit=KEYWORDS))
        print(format_scores(scores, pairs, f"{name}: "))
        report[name] = {"pairs": len(pairs), **{rule: s.summary() for rule, s in scores.items()}}
    if args.json:
        write_json(args.json, report)
    return 0


def run_dida_command(args: argparse.Namespace) -> int:
    from bench.dida import DidaBenchConfig, format_dida, run_dida

    config = DidaBenchConfig(users=args.users, memories=args.memories, project_users=args.project_users,
                             latency_ms=args.latency_ms, concurrency=args.concurrency)
    report = asyncio.run(run_dida(config))
    print(format_dida(report))
    if args.json:
        write_json(args.json, report)
    return 0


def run_board_command(args: argparse.Namespace) -> int:
    from bench.board import BoardBenchConfig, format_board, run_board

    report = asyncio.run(run_board(BoardBenchConfig(args.memories, args.other_users, args.rounds)))
    print(format_board(report))
    if args.json:
        write_json(args.json, report)
    return 0


def run_followups_command(args: argparse.Namespace) -> int:
    from bench.followups import FollowUpBenchConfig, format_followups, run_followups

    config = FollowUpBenchConfig(users=args.users, per_user=args.per_user, rounds=args.rounds,
                                 database_url=args.database_url)
    report = asyncio.run(run_followups(config))
    print(format_followups(report))
    if args.json:
        write_json(args.json, report)
    return 0


def run_plots(args: argparse.Namespace) -> int:
    from bench.plots import draw_all

    for path in draw_all(args.results):
        print(path)
    return 0


def run_astrbot_command(args: argparse.Namespace) -> int:
    from bench.astrbot import run

    results = run(args.rounds)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


COMMANDS = {"convert": run_convert, "recall": run_recall, "merge": run_merge_command,
            "recall-latency": run_latency_command, "loo": run_loo_command,
            "dense-loo": _dense_loo,
            "vector-search": run_vector_search_command,
            "scale": run_scale_command, "bot": run_bot_command, "cost": run_cost_command, "dida": run_dida_command,
            "board": run_board_command,
            "followups": run_followups_command,
            "plots": run_plots, "astrbot": run_astrbot_command, "path": lazy("bench.path"), **SERVER_COMMANDS}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (DatasetError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
