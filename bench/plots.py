"""``python -m bench plots``: PNG charts for BENCHMARKS.md from the JSON results in bench/results/.

Each chart is drawn only when its JSON exists, so a partial set of results still plots. Agg backend:
no display is needed (CI, servers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use(): the backend must be chosen before pyplot loads

RECALL_METRICS = ("hit@1", "hit@2", "recall@5", "recall@10", "mrr")
COLORS = {"engine": "#d1495b", "bm25": "#00798c"}


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def draw_recall(results: Path) -> Path | None:
    files = sorted(results.glob("recall_*.json"))
    if not files:
        return None
    fig, axes = plt.subplots(1, len(files), figsize=(4.2 * len(files), 3.8), sharey=True, squeeze=False)
    for ax, path in zip(axes[0], files, strict=True):
        report = _load(path)
        width = 0.38
        for offset, system in ((-width / 2, "engine"), (width / 2, "bm25")):
            values = [float(report[system].get(m, 0.0)) for m in RECALL_METRICS]
            ax.bar([i + offset for i in range(len(RECALL_METRICS))], values, width, label=system,
                   color=COLORS[system])
        ax.set_xticks(range(len(RECALL_METRICS)), RECALL_METRICS, rotation=30)
        ax.set_title(f"{path.stem.removeprefix('recall_')} ({report['queries']} queries)", fontsize=10)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("score")
    axes[0][0].legend()
    return _save(fig, results / "recall_quality.png")


def draw_scale(results: Path) -> Path | None:
    """Left: each scale figure as a share of its target (1.0 = at the target). Middle: decay and backup
    against the same work done the plain way. Right: bulk load through remember(), cost per user as
    tables accumulate."""
    path = results / "scale.json"
    if not path.exists():
        return None
    report = _load(path)
    targets = report["targets"]
    if "startup" not in report:  # a result from before this layout
        return None
    figures = [
        ("decay", report["decay"]["seconds"], targets["decay_s"]),
        ("backup", report["backup"]["seconds"], targets["backup_s"]),
        ("start-up", report["startup"]["seconds"], targets["startup_s"]),
        ("new user\n1st write p50", report["write_new_user"]["p50"], targets["write_new_user_p50_ms"]),
        ("bulk remember\n(target/rate)", targets["build_rows_per_s"], max(report["build"]["rows_per_s"], 1)),
        ("recall p95\n10k user", report["recall_big"]["warm"]["p95"], targets["recall_p95_ms_big"]),
        ("recall p95\ntypical", report["recall_typical"]["warm"]["p95"], targets["recall_p95_ms_typical"]),
        ("peak RSS", report["rss_mb_peak"], targets["rss_mb_peak"]),
    ]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(17, 4.5), gridspec_kw={"width_ratios": [3, 1.3, 1.6]})
    shares = [value / target for _, value, target in figures]
    left.bar(range(len(figures)), shares, color=["#3d85c6" if s <= 1 else "#d1495b" for s in shares])
    left.axhline(1.0, color="red", linestyle="--", label="target")
    left.set_xticks(range(len(figures)), [f[0] for f in figures], fontsize=8)
    left.set_yscale("log")
    left.set_ylabel("measured / target (log; below 1 = met)")
    left.set_title(f"{report['rows']['memories']:,} memories, {report['rows']['tables']:,} user tables")
    left.legend(fontsize=8)
    jobs = [("decay", report["decay"]), ("backup", report["backup"])]
    plain = [job["plain"].get("with_snapshot_s", job["plain"]["seconds"]) for _, job in jobs]
    middle.bar([i - 0.2 for i in range(2)], [job["seconds"] for _, job in jobs], 0.4, color="#3d85c6", label="engine")
    middle.bar([i + 0.2 for i in range(2)], plain, 0.4, color="#9fc5e8", label="plain way")
    middle.set_xticks(range(2), [f"{name}\n(x{job['plain_ratio']})" for name, job in jobs])
    middle.set_ylabel("seconds")
    middle.set_title("same work, plainest way")
    middle.legend(fontsize=8)
    slices = report["build"].get("seconds_per_slice", [])
    step = report["build"]["users_per_slice"]
    right.plot([step * (n + 1) for n in range(len(slices))], [s / step * 1000 for s in slices], marker="o",
               color="#3d85c6")
    right.set_xlabel("user tables in the database")
    right.set_ylabel(f"ms per user ({report['rows']['per_user']} memories, one remember())")
    right.set_title("bulk load: cost of one more user")
    right.set_ylim(bottom=0)
    return _save(fig, results / "scale.png")


def draw_bot(results: Path) -> Path | None:
    path = results / "bot.json"
    if not path.exists():
        return None
    report = _load(path)
    runs = report.get("runs", [report])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.bar([f"run {n + 1}" for n in range(len(runs))], [r["messages_per_s"] for r in runs], color="#3d85c6")
    left.axhline(300, color="red", linestyle="--", label="target 300/s")
    left.set_ylabel("messages per second")
    left.set_title(f"{report['config']['users']} users x {report['config']['messages']} messages")
    left.legend(fontsize=8)
    percentiles = ("p50", "p95", "p99")
    for n, run in enumerate(runs):
        right.plot(percentiles, [run["latency_ms"][p] for p in percentiles], marker="o", label=f"run {n + 1}")
    right.set_ylabel("ms, message pushed -> answer sent")
    right.set_title("latency under load")
    right.legend(fontsize=8)
    return _save(fig, results / "bot.png")


def draw_cost(results: Path) -> Path | None:
    path = results / "cost.json"
    if not path.exists():
        return None
    report = _load(path)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    per100 = report["per_100_turns"]
    purposes = [p for p in ("extraction", "profile") if p in per100]
    left.bar(purposes, [per100[p].get("calls", 0) for p in purposes], color="#3d85c6")
    left.axhline(report["targets"]["non_reply_calls_per_100_turns"], color="red", linestyle="--",
                 label="target: all non-reply calls")
    left.set_ylabel("calls per 100 user turns")
    left.set_title(f"non-reply calls: {report['non_reply_calls_per_100_turns']} per 100 turns")
    left.legend(fontsize=8)
    series = report["context_tokens_per_turn"]
    right.plot(range(1, len(series) + 1), series, color="#3d85c6", linewidth=1)
    right.axhline(report["targets"]["memory_context_tokens_per_reply"], color="red", linestyle="--", label="target")
    right.set_xlabel("user turn")
    right.set_ylabel("est. tokens of memory in the prompt")
    right.set_title("memory context per reply call")
    right.legend(fontsize=8)
    return _save(fig, results / "cost.png")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(results: Path) -> list[Path]:
    drawn = (draw(results) for draw in (draw_recall, draw_scale, draw_bot, draw_cost))
    return [path for path in drawn if path is not None]
