"""Memories as CSV for operators (``/mem_export``, ``python bot.py export``): the backups' columns and
cell forms (``csvformat.backup_row``, importance rounded), formatted from ``Memory`` objects instead of SQL,
with the scope in front so one file can hold many users; written as every CSV is (``core.csvfile``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import tzinfo

from companion.core.csvfile import csv_bytes
from companion.core.csvformat import HEADERS, backup_row
from companion.core.models import Memory, Scope

SCOPE_HEADER = "范围"


def export_csv_bytes(rows: Iterable[tuple[Scope, Memory]], tz: tzinfo, *,
                     scope_name: Callable[[Scope], str] = lambda scope: scope.key) -> tuple[bytes, int]:
    """The CSV file's bytes and the number of memory rows in it; ``scope_name``: the scope column's words
    (a host that labels its scopes: the AstrBot plugin's ``platform:sender``)."""
    return csv_bytes((SCOPE_HEADER, *HEADERS), ((scope_name(scope), *backup_row(memory, tz, rounded=True))
                                                for scope, memory in rows))
