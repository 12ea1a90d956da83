"""The AstrBot plugin's costs inside real AstrBot, side by side with AstrBot alone: start-up, the plugin's
own import, opening its engine, the ``on_llm_request`` hook per request (20 memories, recall on) and the
process's peak memory. Medians of ``rounds`` runs; ``python -m bench astrbot`` (docs/benchmarks-history.md §10)."""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from companion.hosts.astrbot.build import NAME, build
from tests.astrbot.conftest import install, start_astrbot
from tests.astrbot.venvs import pinned, python_of
from tests.fakes import FakeLLM

IMPORT_PROBE = """
import sys, time
sys.path.insert(0, ".")
import astrbot.api, astrbot.api.event, astrbot.api.provider, astrbot.api.star
began = time.perf_counter()
import data.plugins.{name}.main
print(time.perf_counter() - began)
"""


def plugin_import_seconds(python: Path, root: Path) -> float:
    """A cold import of the plugin's module after AstrBot's API (what loading it adds), in a fresh process."""
    env = {**os.environ, "ASTRBOT_ROOT": str(root), "ASTRBOT_DISABLE_METRICS": "1"}
    probe = subprocess.run([str(python), "-c", IMPORT_PROBE.format(name=NAME)], capture_output=True, text=True,
                           cwd=root, env=env, timeout=300, check=True)
    return float(probe.stdout.strip().splitlines()[-1])


async def one_round(python: Path, plugin_dir: Path, work: Path) -> dict[str, float]:
    found: dict[str, float] = {}
    async with FakeLLM() as llm:
        alone = await start_astrbot(python, work / "alone", llm, plugin=False)
        try:
            found["boot_seconds_alone"] = alone.ready["boot_seconds"]
            found["max_rss_mb_alone"] = (await alone.measure())["max_rss_mb"]
        finally:
            await alone.stop()
        install(plugin_dir, work / "with")
        bot = await start_astrbot(python, work / "with", llm)
        try:
            found["boot_seconds_with_plugin"] = bot.ready["boot_seconds"]
            measured = await bot.measure()
        finally:
            await bot.stop()
    found.update({f"{k}_with_plugin" if k == "max_rss_mb" else k: v for k, v in measured.items()})
    found["plugin_import_seconds"] = round(plugin_import_seconds(python, work / "with"), 4)
    return found


def run(rounds: int = 3) -> dict[str, Any]:
    python = python_of(pinned())
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        plugin_dir, _ = build(work / "dist")
        runs = [asyncio.run(one_round(python, plugin_dir, work / f"round{i}")) for i in range(rounds)]
    return {"rounds": rounds, **{key: statistics.median(r[key] for r in runs) for key in runs[0]}}
