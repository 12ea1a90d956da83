"""``core.cells`` rules as SQL expressions over a memory table, so a backup of a million rows costs little
more than the csv module alone (formatting each ``Memory`` in Python took several times as long). The
snapshot reader (``snapshot.SnapshotReader.cell_rows``) runs them in SQLite's SQL, PostgreSQL's store
(``stream_cells``) in its own (``Dialect``). What can be is built from the Python rule's own data (the
formula prefixes, the codes' labels, the offset's text); ``tests/test_cellsql.py`` holds every expression
equal to ``core.cells.memory_cells`` for any value (a property test), in both databases."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from companion.core.cells import (
    FORMULA_PREFIXES,
    NEUTRALISER,
    CellColumn,
    CellKind,
    memory_cells,
    offset_text,
    show_code,
    show_time,
)
from companion.core.csvfile import csv_text
from companion.core.models import Memory, Scope, Status
from companion.core.timeutil import from_db

TOMBSTONE = f"status = '{Status.FORGOTTEN.value}'"


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between two backends' SQL: a character by its code, a local time (column, seconds
    east of UTC, the offset's text), a list column as comma text, a number or a switch as a number."""

    char: Callable[[int], str]
    time: Callable[[str, int, str], str]
    words: Callable[[str], str]
    plain: Callable[[str], str]


SQLITE = Dialect(
    char=lambda code: f"char({code})",
    time=lambda column, seconds, text: f"datetime({column}, '{seconds:+d} seconds') || '{text}'",
    words=lambda column: column,  # stored as comma text already
    plain=lambda column: column,  # a switch is stored as 0/1 already
)


def literal(text: str, dialect: Dialect) -> str:
    """Text from code (a rule's characters, a code's label; never input) as an SQL literal: a control
    character by its code, anything else quoted with its quotes doubled."""
    if len(text) == 1 and not text.isprintable():
        return dialect.char(ord(text))
    return "'" + text.replace("'", "''") + "'"


def _neutralised(column: str, dialect: Dialect) -> str:
    """``core.cells.neutralise`` in SQL, built from its prefixes."""
    prefixes = ", ".join(literal(p, dialect) for p in FORMULA_PREFIXES)
    return (f"CASE WHEN substr({column}, 1, 1) IN ({prefixes}) THEN {literal(NEUTRALISER, dialect)} || {column} "
            f"ELSE {column} END")


def _code(column: str, labels: Mapping[str, str], dialect: Dialect) -> str:
    """``core.cells.show_code`` in SQL: each known code as the rule shows it."""
    cases = " ".join(f"WHEN {literal(code, dialect)} THEN {literal(show_code(labels, code), dialect)}"
                     for code in labels)
    return f"CASE {column} {cases} ELSE {column} END" if cases else column


def _content(expression: str) -> str:
    """A tombstone's row carries no content, whatever its table row holds."""
    return f"CASE WHEN {TOMBSTONE} THEN NULL ELSE {expression} END"


def select_cells(columns: Sequence[CellColumn], offset: timedelta | None, dialect: Dialect = SQLITE) -> list[str]:
    """One SQL expression per column. With a fixed offset, times are shifted and marked in SQL; without
    one they come raw and ``finisher`` converts them. Fields and labels come from code, never from input."""
    out: list[str] = []
    for c in columns:
        if c.kind is CellKind.TEXT:
            shown = _neutralised(c.field, dialect)
        elif c.kind is CellKind.WORDS:
            shown = _neutralised(dialect.words(c.field), dialect)
        elif c.kind is CellKind.TIME and offset is not None:
            shown = dialect.time(c.field, int(offset.total_seconds()), offset_text(offset))
        elif c.kind is CellKind.CODE:
            shown = _code(c.field, c.labels or {}, dialect)
        elif c.kind is CellKind.PLAIN:
            shown = dialect.plain(c.field)
        else:
            shown = c.field  # an importance: a REAL, which csv writes in full
        out.append(_content(shown) if c.content else shown)
    return out


def _from_text(cell: Any) -> datetime:
    return from_db(str(cell))


def finisher(columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None,
             moment: Callable[[Any], datetime] = _from_text) -> Callable[[Sequence[Any]], tuple[Any, ...]] | None:
    """Converts stored UTC times (read by ``moment``: SQLite's text by default) to local ones where SQL
    could not (no fixed offset); None when SQL did."""
    if offset is not None:
        return None
    times = [i for i, c in enumerate(columns) if c.kind is CellKind.TIME]

    def finish(row: Sequence[Any]) -> tuple[Any, ...]:
        cells = list(row)
        for i in times:
            if cells[i] is not None:
                cells[i] = show_time(moment(cells[i]), tz)
        return tuple(cells)

    return finish


async def csv_of(memories: AsyncIterator[tuple[Scope, list[Memory]]], columns: Sequence[CellColumn], tz: tzinfo,
                 tail: Sequence[str]) -> AsyncIterator[tuple[Scope, str, int]]:
    """``MemoryRecords.stream_csv`` of a store that streams its memories and formats them in Python."""
    async for scope, batch in memories:
        yield scope, csv_text([*memory_cells(m, columns, tz), *tail] for m in batch), len(batch)
