"""Every SQL copy of a cell rule (``storage.cellsql``'s expressions, in SQLite's SQL and PostgreSQL's, and
PostgreSQL's copy of the csv module's quoting, ``postgres.cells.csv_cell``) equals the Python rule
(``core.cells.memory_cells`` written by ``core.csvfile``) for any value: text starting with a formula's
character, quotes, commas and line breaks, any importance, any moment in any fixed-offset zone, every code,
tombstones. A value is bound into a one-row query as the store keeps it (its row codec), so what is tested is
exactly the expression a backup runs."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import Any

import asyncpg
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.core.cells import FORMULA_PREFIXES, CellColumn, CellKind, memory_cells
from companion.core.csvfile import csv_text
from companion.core.csvformat import CELLS, COLUMNS, fixed_offset
from companion.core.models import Status
from companion.storage.cellsql import SQLITE, select_cells
from companion.storage.postgres.csvcells import POSTGRES, csv_cell
from companion.storage.postgres.row_codec import CODECS as POSTGRES_CODECS
from companion.storage.rows import MEMORY_CODECS
from tests.pgtest import SERVER, require_server
from tests.test_cellsql import NOW, memories

BASE = memories()[0]
ENUMS = {c.field: c.enum for c in COLUMNS if c.enum is not None}
# Every rule but the date's, which is stored as it is shown (the column itself in both databases).
RULED = [c for c in CELLS if c.kind is not CellKind.DATE]
CHARACTERS = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")  # PostgreSQL takes no NUL
HEADS = st.sampled_from([*FORMULA_PREFIXES, "", " ", '"', ",", "\n", "a", "奶"])  # what the rules look at, often
TEXTS = st.builds(lambda head, rest: head + rest, HEADS, st.text(CHARACTERS, max_size=8))
WORDS = st.lists(TEXTS.map(lambda w: w.replace(",", "")).filter(bool), max_size=4)  # keywords hold no comma
MOMENTS = st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC)).map(
    lambda moment: moment.replace(microsecond=0))
ZONES = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
POSTGRES_TYPES = {CellKind.TEXT: "text", CellKind.CODE: "text", CellKind.WORDS: "text[]", CellKind.TIME: "timestamptz",
                  CellKind.IMPORTANCE: "float8", CellKind.PLAIN: "bigint"}


def values(column: CellColumn) -> st.SearchStrategy[Any]:
    enum = ENUMS.get(column.field)
    if enum is not None:
        return st.sampled_from(list(enum))
    if column.field == "pinned":
        return st.booleans()
    return {CellKind.PLAIN: st.integers(-(2**63) + 1, 2**63 - 1), CellKind.TEXT: TEXTS, CellKind.WORDS: WORDS,
            CellKind.IMPORTANCE: st.floats(0, 100), CellKind.TIME: MOMENTS}[column.kind]


def python_line(column: CellColumn, value: Any, status: Status, tz: tzinfo) -> str:
    """The Python rule's cell, as the csv writer writes it (a second cell after it: csv writes a row of one
    empty cell as ``""``)."""
    return csv_text([[*memory_cells(replace(BASE, **{column.field: value, "status": status}), [column], tz), "x"]])


def one_row(column: CellColumn, value: str, status: str) -> str:
    """A one-row table holding the value and the status a tombstone's blank cells read, bound at these marks
    (the status column's own value is its status)."""
    also = "" if column.field == "status" else f", {status} AS status"
    return f"(SELECT {value} AS {column.field}{also}) AS row"


def drawn(data: st.DataObject, status: Status) -> tuple[CellColumn, Any, Status]:
    column = data.draw(st.sampled_from(RULED))
    value = data.draw(values(column))
    return column, value, value if column.field == "status" else status


@settings(max_examples=400, deadline=None)
@given(data=st.data(), tz=ZONES, status=st.sampled_from(Status))
def test_sqlite_cell_sql_equals_the_python_rule_for_any_value(data: st.DataObject, tz: tzinfo, status: Status) -> None:
    column, value, status = drawn(data, status)
    expression = select_cells([column], fixed_offset(tz, NOW), SQLITE)[0]
    bound = (MEMORY_CODECS[column.field].dump(value),) + (() if column.field == "status" else (status.value,))
    with sqlite3.connect(":memory:") as db:
        (cell,) = db.execute(f"SELECT {expression} FROM {one_row(column, '?1', '?2')}", bound).fetchone()
    assert csv_text([[cell, "x"]]) == python_line(column, value, status, tz)


def test_postgresql_cell_sql_and_quoting_equal_the_python_rule_for_any_value() -> None:
    """PostgreSQL writes the line itself: its cell expressions and its copy of csv's quoting and float text."""
    require_server()
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(SERVER))

    @settings(max_examples=400, deadline=None)
    @given(data=st.data(), tz=ZONES, status=st.sampled_from(Status))
    def rule(data: st.DataObject, tz: tzinfo, status: Status) -> None:
        column, value, status = drawn(data, status)
        kind = "boolean" if column.field == "pinned" else POSTGRES_TYPES[column.kind]
        expression = csv_cell(column, select_cells([column], fixed_offset(tz, NOW), POSTGRES)[0])
        bound = (POSTGRES_CODECS[column.field].dump(value),) + (() if column.field == "status" else (status.value,))
        query = f"SELECT {expression} FROM {one_row(column, f'$1::{kind}', '$2::text')}"
        cell = loop.run_until_complete(conn.fetchval(query, *bound))
        assert f"{'' if cell is None else cell},x\r\n" == python_line(column, value, status, tz)

    try:
        rule()
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
