"""``core.cells`` rules as SQL expressions over a memory table, so a backup of a million rows costs little
more than the csv module alone (formatting each ``Memory`` in Python took several times as long). The
snapshot reader (``snapshot.SnapshotReader.cell_rows``) runs them; ``tests/test_cellsql.py`` holds them
equal to ``core.cells.memory_cells``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta, tzinfo
from typing import Any

from companion.core.cells import CellColumn, CellKind, offset_text, show_time
from companion.core.models import Status
from companion.core.timeutil import from_db

TOMBSTONE = f"status = '{Status.FORGOTTEN.value}'"


def _neutralised(column: str) -> str:
    return (f"CASE WHEN substr({column}, 1, 1) IN ('=', '+', '-', '@', char(9), char(13), '''') "
            f"THEN '''' || {column} ELSE {column} END")


def _code(column: str, labels: dict[str, str]) -> str:
    cases = " ".join(f"WHEN '{code}' THEN '{code}（{label}）'" for code, label in labels.items())
    return f"CASE {column} {cases} ELSE {column} END" if cases else column


def _content(expression: str) -> str:
    """A tombstone's row carries no content, whatever its table row holds."""
    return f"CASE WHEN {TOMBSTONE} THEN NULL ELSE {expression} END"


def select_cells(columns: Sequence[CellColumn], offset: timedelta | None) -> list[str]:
    """One SQL expression per column. With a fixed offset, times are shifted and marked in SQL; without
    one they come raw and ``finisher`` converts them. Fields and labels come from code, never from input."""
    out: list[str] = []
    for c in columns:
        if c.kind in (CellKind.TEXT, CellKind.WORDS):
            shown = _neutralised(c.field)
        elif c.kind is CellKind.TIME and offset is not None:
            seconds = int(offset.total_seconds())
            shown = f"datetime({c.field}, '{seconds:+d} seconds') || '{offset_text(offset)}'"
        elif c.kind is CellKind.CODE:
            shown = _code(c.field, dict(c.labels or {}))
        else:
            shown = c.field  # numbers; an importance is a REAL, which csv writes in full
        out.append(_content(shown) if c.content else shown)
    return out


def finisher(columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None
             ) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
    """Converts stored UTC times to local ones where SQL could not (no fixed offset); None when SQL did."""
    if offset is not None:
        return None
    times = [i for i, c in enumerate(columns) if c.kind is CellKind.TIME]

    def finish(row: tuple[Any, ...]) -> tuple[Any, ...]:
        cells = list(row)
        for i in times:
            if cells[i] is not None:
                cells[i] = show_time(from_db(str(cells[i])), tz)
        return tuple(cells)

    return finish
