"""CSV as every exporter of this project writes it, one way for all: the csv module's default dialect (minimal
quoting, CRLF line ends), in UTF-8 with a BOM so that Excel opens it with the Chinese intact. The nightly
backup's files, the operators' export and the lines a store renders (``MemoryRecords.stream_csv``) are all
written here; what goes in the columns is the caller's (a memory's: ``ops.backup.csvformat``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

ENCODING = "utf-8-sig"  # UTF-8 with a BOM: Excel reads it as UTF-8


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """Rows as CSV text, without a header: what a store streams and a file holds after its header."""
    out = io.StringIO(newline="")
    csv.writer(out).writerows(rows)
    return out.getvalue()


def _write(handle: TextIO, header: Sequence[str], rows: Iterable[Sequence[object]], lines: Iterable[str]) -> int:
    writer = csv.writer(handle)
    writer.writerow(header)
    count = 0
    for row in rows:
        writer.writerow(row)
        count += 1
    for text in lines:
        handle.write(text)
    return count


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]], lines: Iterable[str] = ()) -> int:
    """A CSV file at ``path``: the header, then ``rows``, then ``lines`` of CSV text written before
    (``csv_text``, a store's ``stream_csv``), streamed; returns the rows written (``lines`` are not counted).
    Not yet durable: the caller syncs it."""
    with path.open("w", encoding=ENCODING, newline="") as handle:
        return _write(handle, header, rows, lines)


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[object]]) -> tuple[bytes, int]:
    """The bytes of a CSV file (header and ``rows``), to send or save whole, and how many rows it holds."""
    out = io.StringIO(newline="")
    count = _write(out, header, rows, ())
    return out.getvalue().encode(ENCODING), count
