"""The ``/mem_stats`` usage chart: LLM tokens per local day, stacked by kind, drawn with matplotlib.

matplotlib is optional (in requirements.txt; the engine's extra [charts]): with its dependencies it is ~80 MB installed
(matplotlib 35 MB, fontTools 30 MB, Pillow 7 MB, kiwisolver 5 MB) for one admin picture, and importing
it costs about a second. So it is imported here, inside ``usage_png``, only when an admin asks for the
chart: the bot's start-up and memory never pay for it, and without it ``/mem_stats`` still answers with
every number in text and says how to get the chart.

Labels are Chinese when a CJK font is installed (matplotlib would draw missing glyphs as boxes), and
English otherwise.
"""

from __future__ import annotations

import io
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from companion.core.errors import ChartUnavailableError

# Fonts with Simplified Chinese glyphs, as matplotlib names them, most common on servers first.
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "Droid Sans Fallback", "Microsoft YaHei", "PingFang SC", "SimHei", "Heiti SC",
             "Sarasa Gothic SC", "AR PL UMing CN")
COLORS = ("#4c72b0", "#dd8452", "#55a868")  # cached prompt, uncached prompt, completion
WIDTH_IN, HEIGHT_IN, DPI = 8.0, 4.0, 100  # an 800 x 400 PNG: readable in a Telegram preview


@dataclass(frozen=True)
class Labels:
    title: str
    axis: str
    series: tuple[str, str, str]  # cached prompt, uncached prompt, completion


CHINESE = Labels("最近7天的模型词元（按天）", "词元", ("输入·缓存命中", "输入·未缓存", "输出"))
ENGLISH = Labels("LLM tokens per day, last 7 days", "tokens", ("prompt, cached", "prompt, uncached", "completion"))


def pick_labels(installed: Collection[str]) -> tuple[Labels, str | None]:
    """Chinese labels and the font to draw them with when one of ``CJK_FONTS`` is installed."""
    for font in CJK_FONTS:
        if font in installed:
            return CHINESE, font
    return ENGLISH, None


def usage_png(days: Sequence[str], columns: Sequence[tuple[int, int, int]]) -> bytes:
    """A PNG of one stacked bar per day (``days`` as YYYY-MM-DD; ``columns[i]``: cached prompt,
    uncached prompt and completion tokens of day ``i``), each bar topped by its total."""
    try:
        import matplotlib
        from matplotlib import font_manager
        from matplotlib.figure import Figure
        from matplotlib.ticker import StrMethodFormatter
    except ImportError as exc:
        raise ChartUnavailableError("matplotlib is not installed (pip install 'matplotlib~=3.11')") from exc
    matplotlib.use("Agg")  # no display on a server; Figure alone never opens a window either
    labels, font = pick_labels({f.name for f in font_manager.fontManager.ttflist})
    with matplotlib.rc_context({"font.family": [font, "DejaVu Sans"]} if font else None):
        figure = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
        axes = figure.add_subplot()
        ticks = [day[5:] for day in days] or ["—"]  # MM-DD: the title says which week
        bottoms = [0] * len(ticks)
        for part, (name, color) in enumerate(zip(labels.series, COLORS, strict=True)):
            values = [column[part] for column in columns] or [0]
            axes.bar(ticks, values, bottom=bottoms, color=color, label=name, width=0.6)
            bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
        for x, total in enumerate(bottoms):
            axes.annotate(f"{total:,}", (x, total), ha="center", va="bottom", fontsize=8,
                          xytext=(0, 2), textcoords="offset points")
        axes.set_title(labels.title)
        axes.set_ylabel(labels.axis)
        axes.set_ylim(0, max(max(bottoms) * 1.25, 1))  # headroom for the totals and the one-row legend
        axes.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        axes.spines[["top", "right"]].set_visible(False)
        axes.legend(loc="upper left", ncols=3, fontsize=8, frameon=False)
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png", dpi=DPI)
    return out.getvalue()
