"""How a memory looks as spreadsheet cells (backups, exports): local times with their offset, codes with
their Chinese name, formula-like text neutralised, a tombstone without content. The rules are data
(``CellColumn``) so that a store able to format rows itself (SQLite: ``storage.cellsql``) applies exactly
these; ``memory_cells`` applies them to a ``Memory`` for any other store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from enum import StrEnum

from companion.core import dates
from companion.core.models import Memory, Status

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "'")
NEUTRALISER = "'"  # put before a formula-like cell; restore strips exactly one
SHOWN_TIME = "%Y-%m-%d %H:%M:%S"


class CellKind(StrEnum):
    PLAIN = "plain"  # numbers as they are (a switch as 0/1)
    TEXT = "text"  # neutralised
    WORDS = "words"  # a comma list, neutralised
    IMPORTANCE = "importance"  # the number in full (it reads back as the same number)
    TIME = "time"  # local wall time with its offset
    CODE = "code"  # ``code（名称）``
    DATE = "date"  # when it happens: ``core.dates``' ISO 8601 text, stored as it is shown


@dataclass(frozen=True, slots=True)
class CellColumn:
    """One cell of a memory's row: the ``Memory`` field (a stored column of the same name), how it is
    shown, the names of its codes, and whether a tombstone's row leaves it blank."""

    field: str
    kind: CellKind
    labels: Mapping[str, str] | None = None
    content: bool = False


def neutralise(cell: str) -> str:
    """A leading apostrophe makes Excel show ``=1+1`` as text; restore strips exactly one."""
    return NEUTRALISER + cell if cell.startswith(FORMULA_PREFIXES) else cell


def show_code(labels: Mapping[str, str], value: str) -> str:
    return f"{value}（{labels[value]}）" if value in labels else value


def offset_text(offset: timedelta) -> str:
    """``+08:00``, ``-03:30``: the form ``datetime.fromisoformat`` reads back."""
    seconds = int(offset.total_seconds())
    sign = "-" if seconds < 0 else "+"
    hours, rest = divmod(abs(seconds), 3600)
    return f"{sign}{hours:02d}:{rest // 60:02d}"


def show_time(moment: datetime, tz: tzinfo) -> str:
    """A stored UTC moment as a cell: local wall time with its offset."""
    local = moment.astimezone(tz)
    return local.strftime(SHOWN_TIME) + offset_text(local.utcoffset() or timedelta(0))


def memory_cells(memory: Memory, columns: Sequence[CellColumn], tz: tzinfo, *, rounded: bool = False) -> list[object]:
    """One memory's cells in ``columns`` order; ``rounded`` shows importance with two decimals (for
    reading) instead of in full (for restoring)."""
    cells: list[object] = []
    tombstone = memory.status is Status.FORGOTTEN
    for column in columns:
        value = getattr(memory, column.field)
        if value is None or (tombstone and column.content):
            cells.append(None)
        elif column.kind is CellKind.TIME:
            cells.append(show_time(value, tz))
        elif column.kind is CellKind.IMPORTANCE:
            cells.append(f"{value:.2f}" if rounded else float(value))
        elif column.kind is CellKind.WORDS:
            cells.append(neutralise(",".join(value)))
        elif column.kind is CellKind.TEXT:
            cells.append(neutralise(str(value)))
        elif column.kind is CellKind.CODE:
            cells.append(show_code(column.labels or {}, str(getattr(value, "value", value))))
        elif column.kind is CellKind.DATE:
            cells.append(dates.to_text(value))
        else:
            cells.append(int(value))
    return cells
