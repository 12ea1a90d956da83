"""Memories as CSV for operators (``/mem_export``, ``python bot.py export``): the backups' columns and
cell forms (``csvformat``), formatted from ``Memory`` objects instead of SQL, with the scope in front so
one file can hold many users. UTF-8 with BOM: Excel opens it with the Chinese intact."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from datetime import tzinfo

from companion.core import cells
from companion.core.models import Memory, Scope
from companion.ops.backup.csvformat import CELLS, HEADERS, zone_name

SCOPE_HEADER = "范围"


def memory_cells(memory: Memory, tz: tzinfo) -> list[object]:
    """One memory's cells in ``HEADERS`` order, as a backup writes them but for importance, shown with
    two decimals."""
    return [*cells.memory_cells(memory, CELLS, tz, rounded=True), zone_name(tz)]


def export_csv_bytes(rows: Iterable[tuple[Scope, Memory]], tz: tzinfo, *,
                     scope_name: Callable[[Scope], str] = lambda scope: scope.key) -> tuple[bytes, int]:
    """The CSV file's bytes and the number of memory rows in it; ``scope_name``: the scope column's words
    (a host that labels its scopes: the AstrBot plugin's ``platform:sender``)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow((SCOPE_HEADER, *HEADERS))
    count = 0
    for scope, memory in rows:
        writer.writerow((scope_name(scope), *memory_cells(memory, tz)))
        count += 1
    return buffer.getvalue().encode("utf-8-sig"), count
