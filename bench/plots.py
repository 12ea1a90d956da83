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
    path = results / "scale.json"
    if not path.exists():
        return None
    report = _load(path)
    slices = report["build"].get("seconds_per_slice", [])
    fig, axes = plt.subplots(1, 3 if slices else 2, figsize=(16 if slices else 11, 4))
    left, right = axes[0], axes[1]
    if slices:
        step = report["build"]["users_per_slice"]
        axes[2].plot([step * (n + 1) for n in range(len(slices))], [s / step * 1000 for s in slices], marker="o",
                     color="#3d85c6")
        axes[2].set_xlabel("user tables in the database")
        axes[2].set_ylabel(f"ms per user loaded ({report['config']['per_user']} rows each)")
        axes[2].set_title("bulk load: cost of one more user")
        axes[2].set_ylim(bottom=0)
    groups = [("typical user\n(warm)", report["recall_typical"]["warm"], report["targets"]["recall_p95_ms_typical"]),
              ("big user\n(warm)", report["recall_big"]["warm"], report["targets"]["recall_p95_ms_big"])]
    for i, (_, lat, target) in enumerate(groups):
        for j, p in enumerate(("p50", "p95", "p99")):
            left.bar(i + (j - 1) * 0.25, lat[p], 0.25, color=("#9fc5e8", "#3d85c6", "#073763")[j],
                     label=p if i == 0 else None)
        left.hlines(target, i - 0.4, i + 0.4, colors="red", linestyles="--", label="p95 target" if i == 0 else None)
    left.set_xticks(range(len(groups)), [g[0] for g in groups])
    left.set_yscale("log")
    left.set_ylabel("ms per turn (log)")
    left.set_title("recall + prompt assembly per turn")
    left.legend(fontsize=8)
    jobs = [("decay+cleanup", report["decay"]["per_1m_rows_s"], report["targets"]["decay_s_per_1m_rows"]),
            ("backup", report["backup"]["per_1m_rows_s"], report["targets"]["backup_s_per_1m_rows"])]
    right.bar([j[0] for j in jobs], [j[1] for j in jobs], color="#3d85c6", label="measured")
    right.scatter([j[0] for j in jobs], [j[2] for j in jobs], color="red", marker="_", s=2000, label="target")
    right.set_ylabel("seconds per 1,000,000 rows")
    right.set_title("daily jobs")
    right.legend(fontsize=8)
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
