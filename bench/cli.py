"""``python -m bench convert ...`` and ``python -m bench recall ...``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.convert import ConvertStats, convert_dulemon, convert_locomo, convert_memdaily, write_converted
from bench.convert.memdaily import find_dulemon
from bench.dataset import DatasetError, read_dataset
from bench.metrics import DEFAULT_KS, MetricsAccumulator, Summary
from bench.recall import run_bm25, run_engine
from companion.keywords import KeywordExtractor


def parse_ks(text: str) -> tuple[int, ...]:
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--k wants comma-separated integers, got {text!r}") from exc
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError("--k wants positive integers")
    return tuple(ks)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Offline memory-recall benchmark.")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_convert(commands.add_parser("convert", help="convert a public benchmark to dataset JSON lines"))
    recall = commands.add_parser("recall", help="score the engine and BM25 on a dataset")
    recall.add_argument("dataset", type=Path)
    recall.add_argument("--k", type=parse_ks, default=DEFAULT_KS, help="cut-offs, e.g. 1,2,5,10")
    recall.add_argument("--json", type=Path, help="also write the results here")
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
    for sub in (locomo, memdaily, sources.choices["dulemon"]):
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


def _flatten(summary: Summary) -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            flat.update({f"{name} ms": number for name, number in value.items()})
        else:
            flat[key] = value
    return flat


def _run_engine(args: argparse.Namespace) -> MetricsAccumulator | None:
    # Temporary fallback until run_engine exists: score BM25 alone.
    try:
        return asyncio.run(run_engine(read_dataset(args.dataset), args.k))
    except NotImplementedError:
        print("engine runner not available yet: BM25 only", file=sys.stderr)
        return None


def run_recall(args: argparse.Namespace) -> int:
    extractor = KeywordExtractor()
    extractor.load()
    bm25 = run_bm25(read_dataset(args.dataset), args.k, extractor)
    if bm25.count == 0:
        print(f"{args.dataset}: no queries", file=sys.stderr)
        return 2
    engine = _run_engine(args)
    if engine is not None and engine.count != bm25.count:
        print(f"engine scored {engine.count} queries, BM25 {bm25.count}", file=sys.stderr)
        return 2
    systems = {"bm25": bm25.summary()}
    if engine is not None:
        systems = {"engine": engine.summary(), **systems}
    print(f"{bm25.count} queries")
    print(format_table(systems))
    if args.json:
        report = {"queries": bm25.count, "engine": systems.get("engine"), "bm25": systems["bm25"]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_convert(args) if args.command == "convert" else run_recall(args)
    except (DatasetError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
