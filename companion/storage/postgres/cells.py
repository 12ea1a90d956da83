"""PostgreSQL's side of ``MemoryRecords.stream_cells``: a backup's cells formatted by the server
(``cellsql``'s rules in this server's SQL) and read across every scope in large pages by keyset (scope,
handle), so a million rows take a few hundred short reads instead of two per scope, and Python only splits
each page by scope. ``tests/test_cellsql.py`` holds the cells equal to ``core.cells.memory_cells``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta, tzinfo
from typing import Any

from companion.core.cells import CellColumn
from companion.core.models import Scope
from companion.storage.cellsql import Dialect, finisher, select_cells
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


def queries(columns: Sequence[CellColumn], offset: timedelta | None) -> tuple[str, str]:
    """The first page's statement and every later one's (``$2, $3, $4``: the last row's scope and handle)."""
    head = f"SELECT user_id, chat_id, id, {', '.join(select_cells(columns, offset, POSTGRES))} FROM memories"
    return f"{head} {_ORDER}", f"{head} WHERE (user_id, chat_id, id) > ($2, $3, $4) {_ORDER}"


def split(rows: Sequence[Any], columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None
          ) -> list[tuple[Scope, list[Sequence[object]]]]:
    """One page's rows as runs of one scope each (the page is in scope order), cells only."""
    finish = finisher(columns, tz, offset, lambda moment: moment)  # asyncpg gives aware UTC datetimes
    runs: list[tuple[Scope, list[Sequence[object]]]] = []
    last: tuple[int, int] | None = None
    for row in rows:
        owner = (row[0], row[1])
        if owner != last:
            runs.append((scope_of(*owner), []))
            last = owner
        cells = row[3:]
        runs[-1][1].append(cells if finish is None else finish(cells))
    return runs
