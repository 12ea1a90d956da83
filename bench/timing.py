"""Small timing helpers shared by the benchmarks: latency samples, peak memory, JSON output."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import resource
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.metrics import percentile


def latency_summary(samples_ms: list[float]) -> dict[str, float]:
    """p50/p95/p99 and the count, in milliseconds, rounded for reading."""
    if not samples_ms:
        return {"n": 0, "p50": 0.0, "p95": 0.0, "p99": 0.0}
    return {"n": len(samples_ms), **{f"p{p}": round(percentile(samples_ms, p), 4) for p in (50, 95, 99)}}


class Stopwatch:
    """Collects durations in milliseconds: ``with watch: ...`` adds one sample."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.samples.append((time.perf_counter() - self._started) * 1000)

    def summary(self) -> dict[str, float]:
        return latency_summary(self.samples)


@contextmanager
def elapsed() -> Iterator[list[float]]:
    """``with elapsed() as t: ...`` then ``t[0]`` is the wall time in seconds."""
    box: list[float] = []
    started = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - started)


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def machine() -> dict[str, Any]:
    """Where a number was measured; the load average shows whether other work shared the CPU."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "loadavg_1m_at_end": round(os.getloadavg()[0], 2)}


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def progress(label: str, done: int, total: int) -> None:
    """A progress line on stderr every 10% of a long setup, so it is visibly alive."""
    if total >= 1000 and (done == total or done % (total // 10) == 0):
        print(f"  {time.strftime('%H:%M:%S')} {label}: {done}/{total}", file=sys.stderr, flush=True)


class GcWatch:
    """Collections of each generation and the seconds spent in them while watched (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.seconds += time.perf_counter() - self._began

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def report(self) -> dict[str, Any]:
        return {"collections": list(self.collections), "seconds": round(self.seconds, 3)}


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads, by thread name and id, where ``/proc`` tells them
    (Linux); empty elsewhere. The bot's throughput is bound by its event loop's thread, not by the process."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    # Python 3.11 leaves its threads' OS names at the process's: name them as ``threading`` does.
    named = {str(t.native_id): t.name for t in threading.enumerate()}
    found: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                name = named.get(tid) or Path(f"/proc/self/task/{tid}/comm").read_text(encoding="utf-8").strip()
                fields = Path(f"/proc/self/task/{tid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
                found[f"{name}:{tid}"] = (int(fields[11]) + int(fields[12])) / ticks  # utime + stime
    return found


def thread_cpu_since(before: dict[str, float], *, at_least: float = 0.05) -> dict[str, float]:
    """The CPU seconds each thread spent since ``before`` (``thread_cpu``), the busiest first; threads that
    spent less than ``at_least`` are left out."""
    spent = {name: round(now - before.get(name, 0.0), 2) for name, now in thread_cpu().items()}
    return dict(sorted(((n, s) for n, s in spent.items() if s >= at_least), key=lambda item: -item[1]))
