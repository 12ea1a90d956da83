"""Memories as CSV for operators (``/mem_export``, ``python bot.py export``): the backups' columns and
cell forms (``csvformat``), formatted from ``Memory`` objects instead of SQL, with the scope in front so
one file can hold many users. UTF-8 with BOM: Excel opens it with the Chinese intact."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import tzinfo
from enum import StrEnum

from companion.core.models import Memory, Scope, Status
from companion.ops.csvformat import COLUMNS, CONTENT_FIELDS, HEADERS, Kind, neutralise, show_code, show_time, zone_name

SCOPE_HEADER = "范围"


def memory_cells(memory: Memory, tz: tzinfo) -> list[object]:
    """One memory's cells in ``HEADERS`` order, as a backup writes them."""
    cells: list[object] = []
    tombstone = memory.status is Status.FORGOTTEN
    for column in COLUMNS:
        value = getattr(memory, column.field)
        if value is None or (tombstone and column.field in CONTENT_FIELDS):
            cells.append(None)
        elif column.kind is Kind.TIME:
            cells.append(show_time(value, tz))
        elif column.kind is Kind.IMPORTANCE:
            cells.append(f"{value:.2f}")
        elif column.kind is Kind.WORDS:
            cells.append(neutralise(",".join(value)))
        elif column.kind is Kind.TEXT:
            cells.append(neutralise(str(value)))
        elif column.kind is Kind.CODE:
            assert column.enum is not None and isinstance(value, StrEnum)
            cells.append(show_code(column.enum, value.value))
        elif column.kind is Kind.BOOL:
            cells.append(int(value))
        else:
            cells.append(value)
    cells.append(zone_name(tz))
    return cells


def export_csv_bytes(rows: Iterable[tuple[Scope, Memory]], tz: tzinfo) -> tuple[bytes, int]:
    """The CSV file's bytes and the number of memory rows in it."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow((SCOPE_HEADER, *HEADERS))
    count = 0
    for scope, memory in rows:
        writer.writerow((scope.key, *memory_cells(memory, tz)))
        count += 1
    return buffer.getvalue().encode("utf-8-sig"), count
