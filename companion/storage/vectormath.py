"""Memory vectors as both backends store and score them: L2-normalised float32 packed into bytes, and cosine
similarity as dot products. Imports no database driver (SQLite's table is ``sqlite.vectors``, PostgreSQL's
``postgres.extras``)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence


def pack(vector: Sequence[float]) -> bytes:
    return array("f", vector).tobytes()


def unpack(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    return values


def similarities(blobs: Sequence[bytes], query: Sequence[float]) -> list[float]:
    """Dot products of stored float32 vectors (all of the query's length) with the query, as one matrix
    product: numpy comes with pandas, and at 10,000 vectors of 1,024 dimensions a Python loop takes a
    quarter of a second. Imported here, not at start-up: only semantic recall needs it."""
    import numpy as np

    if not blobs:
        return []
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), -1)
    return [float(x) for x in matrix @ np.asarray(query, dtype=np.float32)]
