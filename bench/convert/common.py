"""Shared pieces of the converters: run statistics and text clean-up."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bench.dataset import DatasetLine, MemoryLine, write_dataset

# Word segmentation spaces sit between CJK words; spaces between two Latin words or numbers are real.
_SEGMENT_SPACE = re.compile(r"(?<![A-Za-z0-9])\s+|\s+(?![A-Za-z0-9])")


def join_segmented(text: str) -> str:
    """Undo DuLeMon's word segmentation: ``我 在 IT 部门`` -> ``我在IT部门``, but keep ``New York``."""
    return _SEGMENT_SPACE.sub("", re.sub(r"\s+", " ", text.strip()))


@dataclass
class ConvertStats:
    """What a conversion wrote and what it left out, for the stderr summary."""

    memories: int = 0
    queries: int = 0
    users: set[str] = field(default_factory=set)
    dropped: Counter[str] = field(default_factory=Counter)  # questions left out, by reason
    notes: Counter[str] = field(default_factory=Counter)  # repairs and other counts worth knowing

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] += n

    def note(self, what: str, n: int = 1) -> None:
        self.notes[what] += n

    def count(self, lines: Iterable[DatasetLine]) -> Iterator[DatasetLine]:
        for line in lines:
            self.users.add(line.user)
            if isinstance(line, MemoryLine):
                self.memories += 1
            else:
                self.queries += 1
            yield line

    def render(self, title: str) -> str:
        out = [f"{title}: {self.memories} memories, {self.queries} queries, {len(self.users)} users"]
        total = sum(self.dropped.values())
        out.append(f"  dropped questions: {total}")
        out.extend(f"    {reason}: {n}" for reason, n in sorted(self.dropped.items()))
        out.extend(f"  {what}: {n}" for what, n in sorted(self.notes.items()))
        return "\n".join(out)


def write_converted(lines: Iterable[DatasetLine], out: Path, stats: ConvertStats, title: str,
                    report: TextIO | None = None) -> None:
    write_dataset(out, stats.count(lines))
    print(stats.render(title), file=report or sys.stderr)
