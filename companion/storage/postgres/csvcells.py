"""PostgreSQL's side of ``MemoryRecords.stream_csv``: a backup's CSV lines rendered by the server
(``cellsql``'s rules in this server's SQL, then the csv module's minimal quoting), a page of whole scopes
(about ``batch`` rows) per read, each scope's lines joined by the server, so a million rows take a few
hundred short reads instead of two per scope and Python handles one string per scope, not a row; the next
pages are read while one is handed over. A zone without a fixed offset (daylight saving time) has its
times converted in Python and its lines written by the csv module, paged by keyset (scope, handle).
``tests/test_cellsql.py`` holds the files equal to SQLite's, byte for byte."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta, tzinfo
from itertools import groupby
from typing import Any

from companion.core.cells import CellColumn, CellKind
from companion.core.csvfile import csv_text
from companion.core.models import Scope
from companion.storage.cellsql import Dialect, finisher, select_cells
from companion.storage.postgres.row_codec import BOOL, CODECS, scope_of


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
SIZES = "SELECT user_id, chat_id, count(*) FROM memories GROUP BY user_id, chat_id ORDER BY user_id, chat_id"
AHEAD = 2  # pages read while one is handed over: the server renders them on two cores
Fetch = Callable[..., Awaitable[list[Any]]]


def _quoted(cell: str) -> str:
    """The csv module's minimal quoting: a cell holding a comma, a quote or a line break is quoted."""
    return (f"CASE WHEN {cell} ~ E'[\",\\r\\n]' THEN '\"' || replace({cell}, '\"', '\"\"') || '\"' "
            f"ELSE {cell} END")


def csv_cell(column: CellColumn, cell: str) -> str:
    """A cell's text as csv writes it: nothing for NULL, a float as Python's repr (``50.0``, ``1e-05``:
    PostgreSQL's shortest form lacks only the ``.0`` of a whole number). ``tests/test_cellsql.py`` holds it
    equal to the csv module for any value."""
    if column.kind is CellKind.IMPORTANCE:
        return f"regexp_replace(({cell})::text, '^(-?[0-9]+)$', '\\1.0')"
    if column.kind in (CellKind.TEXT, CellKind.WORDS, CellKind.CODE):
        return _quoted(cell)
    return cell  # a number or a time: nothing to quote


def lines_query(columns: Sequence[CellColumn], offset: timedelta) -> str:
    """A page's statement: the scopes ``$1, $2`` (user and chat ids), a row each (its lines joined, in handle
    order, and how many); ``$3``: what ends each line."""
    cells = [csv_cell(c, cell) for c, cell in zip(columns, select_cells(columns, offset, POSTGRES), strict=True)]
    # concat: one copy of the line (a chain of || copies it once per cell) and nothing for a NULL.
    line = "concat(" + ", ',', ".join(cells) + ", $3::text)"
    return (f"SELECT m.user_id, m.chat_id, string_agg({line}, '' ORDER BY m.id), count(*) "
            "FROM unnest($1::bigint[], $2::bigint[]) AS s(user_id, chat_id) "
            "JOIN memories AS m ON m.user_id = s.user_id AND m.chat_id = s.chat_id "
            "GROUP BY m.user_id, m.chat_id ORDER BY m.user_id, m.chat_id")


def pages(sizes: Sequence[Sequence[Any]], batch: int) -> list[tuple[list[int], list[int]]]:
    """Scopes (user id, chat id, rows) in pages of about ``batch`` rows; a larger scope is a page alone."""
    out: list[tuple[list[int], list[int]]] = []
    held = batch
    for user_id, chat_id, rows in sizes:
        if held + int(rows) > batch:
            out.append(([], []))
            held = 0
        out[-1][0].append(int(user_id))
        out[-1][1].append(int(chat_id))
        held += int(rows)
    return out


def cell_queries(columns: Sequence[CellColumn]) -> tuple[str, str]:
    """A page's statements giving a row per memory, its times as stored (``$2, $3, $4``: after)."""
    head = f"SELECT user_id, chat_id, id, {', '.join(select_cells(columns, None, POSTGRES))} FROM memories"
    return f"{head} {_ORDER}", f"{head} WHERE (user_id, chat_id, id) > ($2, $3, $4) {_ORDER}"


def tail_text(tail: Sequence[str]) -> str:
    """What follows each line's cells: the tail's cells (as csv writes them) and the line break."""
    return csv_text([["", *tail]]) if tail else "\r\n"  # "": the cells before, which csv writes as nothing


async def stream_csv(fetch: Fetch, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None,
                     tail: Sequence[str], batch: int) -> AsyncIterator[tuple[Scope, str, int]]:
    """``MemoryRecords.stream_csv`` on ``fetch`` (one statement on a pooled connection, its rows). Pages
    are whole scopes, so the next ones are read (``AHEAD``, on connections of their own) while this one is
    handed over: the server renders on every core it has."""
    if offset is None:
        async for chunk in _converted(fetch, columns, tz, tail, batch):
            yield chunk
        return
    sql, suffix = lines_query(columns, offset), tail_text(tail)
    waiting: deque[asyncio.Future[list[Any]]] = deque()
    try:
        for users, chats in pages(await fetch(SIZES), batch):
            waiting.append(asyncio.ensure_future(fetch(sql, users, chats, suffix)))
            if len(waiting) > AHEAD:
                for user_id, chat_id, lines, count in await waiting.popleft():
                    yield scope_of(user_id, chat_id), str(lines), int(count)
        while waiting:
            for user_id, chat_id, lines, count in await waiting.popleft():
                yield scope_of(user_id, chat_id), str(lines), int(count)
    finally:
        for future in waiting:  # stopped part-way: reads nobody will take
            future.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)


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
