"""PostgreSQL's side of ``MemoryRecords.stream_csv``: a backup's CSV lines rendered by the server
(``cellsql``'s rules in this server's SQL, then the csv module's minimal quoting) and read across every
scope in pages by keyset (scope, handle), each page's lines joined per scope, so a million rows take a few
hundred short reads instead of two per scope and Python handles one string per scope, not a row. A zone
without a fixed offset (daylight saving time) has its times converted in Python and its lines written by
the csv module. ``tests/test_cellsql.py`` holds the files equal to SQLite's, byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta, tzinfo
from itertools import groupby
from typing import Any

from companion.core.cells import CellColumn, CellKind
from companion.core.models import Scope
from companion.storage.cellsql import Dialect, csv_text, finisher, select_cells
from companion.storage.postgres.rows import BOOL, CODECS, scope_of


def _local_time(column: str, seconds: int, text: str) -> str:
    # A timestamp without zone from the stored UTC moment, whatever the session's zone, then shifted.
    return (f"to_char(({column} AT TIME ZONE 'UTC') + interval '{seconds} seconds', 'YYYY-MM-DD HH24:MI:SS') "
            f"|| '{text}'")


POSTGRES = Dialect(
    char=lambda code: f"chr({code})",
    time=_local_time,
    words=lambda column: f"array_to_string({column}, ',')",
    plain=lambda column: f"{column}::int" if CODECS.get(column) is BOOL else column,
)
_ORDER = "ORDER BY user_id, chat_id, id LIMIT $1"
Fetch = Callable[..., Awaitable[list[Any]]]


def _quoted(cell: str) -> str:
    """The csv module's minimal quoting: a cell holding a comma, a quote or a line break is quoted."""
    return (f"CASE WHEN {cell} ~ E'[\",\\r\\n]' THEN '\"' || replace({cell}, '\"', '\"\"') || '\"' "
            f"ELSE {cell} END")


def _shown(column: CellColumn, cell: str) -> str:
    """A cell's text as csv writes it: nothing for NULL, a float as Python's repr (``50.0``, ``1e-05``:
    PostgreSQL's shortest form lacks only the ``.0`` of a whole number)."""
    if column.kind is CellKind.IMPORTANCE:
        return f"regexp_replace(({cell})::text, '^(-?[0-9]+)$', '\\1.0')"
    if column.kind in (CellKind.TEXT, CellKind.WORDS, CellKind.CODE):
        return _quoted(cell)
    return cell  # a number or a time: nothing to quote


def line_queries(columns: Sequence[CellColumn], offset: timedelta) -> tuple[str, str]:
    """A page's statements (the first, and every later one after the scope and handle ``$3, $4, $5``) giving
    a row per scope of the page: its last handle, its lines joined and how many (``$2``: the tail)."""
    cells = [_shown(c, cell) for c, cell in zip(columns, select_cells(columns, offset, POSTGRES), strict=True)]
    # concat: one copy of the line (a chain of || copies it once per cell) and nothing for a NULL.
    line = "concat(" + ", ',', ".join(cells) + ", $2::text)"
    page = f"SELECT user_id, chat_id, id, {line} AS line FROM memories"
    grouped = ("SELECT user_id, chat_id, max(id), string_agg(line, '' ORDER BY id), count(*) FROM ({page}) AS page "
               "GROUP BY user_id, chat_id ORDER BY user_id, chat_id")
    after = "WHERE (user_id, chat_id, id) > ($3, $4, $5)"
    return grouped.format(page=f"{page} {_ORDER}"), grouped.format(page=f"{page} {after} {_ORDER}")


def cell_queries(columns: Sequence[CellColumn]) -> tuple[str, str]:
    """A page's statements giving a row per memory, its times as stored (``$2, $3, $4``: after)."""
    head = f"SELECT user_id, chat_id, id, {', '.join(select_cells(columns, None, POSTGRES))} FROM memories"
    return f"{head} {_ORDER}", f"{head} WHERE (user_id, chat_id, id) > ($2, $3, $4) {_ORDER}"


def tail_text(tail: Sequence[str]) -> str:
    """What follows each line's cells: the tail's cells (as csv writes them) and the line break."""
    return csv_text([["", *tail]]) if tail else "\r\n"  # "": the cells before, which csv writes as nothing


async def stream_csv(fetch: Fetch, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None,
                     tail: Sequence[str], batch: int) -> AsyncIterator[tuple[Scope, str, int]]:
    """``MemoryRecords.stream_csv`` on ``fetch`` (one statement, its rows)."""
    if offset is None:
        async for chunk in _converted(fetch, columns, tz, tail, batch):
            yield chunk
        return
    first, later = line_queries(columns, offset)
    suffix = tail_text(tail)
    rows = await fetch(first, batch, suffix)
    while rows:
        for user_id, chat_id, _, lines, count in rows:
            yield scope_of(user_id, chat_id), str(lines), int(count)
        if sum(int(row[4]) for row in rows) < batch:
            return
        rows = await fetch(later, batch, suffix, *rows[-1][:3])


async def _converted(fetch: Fetch, columns: Sequence[CellColumn], tz: tzinfo, tail: Sequence[str], batch: int
                     ) -> AsyncIterator[tuple[Scope, str, int]]:
    """A zone with daylight saving time: cells from the server, times converted and lines written here."""
    finish = finisher(columns, tz, None, lambda moment: moment)  # asyncpg gives aware UTC datetimes
    assert finish is not None
    first, later = cell_queries(columns)
    rows = await fetch(first, batch)
    while rows:
        for (user_id, chat_id), run in groupby(rows, key=lambda row: (row[0], row[1])):
            lines = [(*finish(row[3:]), *tail) for row in run]
            yield scope_of(user_id, chat_id), csv_text(lines), len(lines)
        if len(rows) < batch:
            return
        rows = await fetch(later, batch, *rows[-1][:3])
