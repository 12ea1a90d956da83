"""Memory vectors for semantic recall, in the memories' own SQLite database (table ``memory_vectors``).

Rows are keyed by the memory handle and tagged with the scope and the embedding model, so a scope's search
never sees another scope's vectors and vectors of a replaced model are never compared with new ones. The
vectors are L2-normalised float32 BLOBs; scoring is cosine similarity, by sqlite-vec's
``vec_distance_cosine`` where the extension loads, otherwise by one numpy product (einsum) over the scope's
vectors, kept in memory per scope while the scope's version (``vector_versions``, bumped by triggers in every
transaction that changes the scope's vectors, in any process) stands. Both read the same table.

Where sqlite-vec loads: CPython's own ``sqlite3`` is often built without extension loading (this project's
Python 3.11 has no ``enable_load_extension``). Then, if the optional ``sqlean.py`` or ``pysqlite3-binary``
wheel is installed (``pip install sqlean.py``), the store opens a second, read-only connection to the
same file with that driver, loads sqlite-vec into it and scores there; WAL lets it read what the store's
connection committed. The store itself keeps the standard driver (its errors are ``sqlite3.Error``; these
drivers raise their own classes).

Every write is one short transaction on the store's own connection (``SQLiteStore.transaction``), so
vector writes never wait on an embedding call and do not look like another process's commits.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from companion.core.models import Scope, Status
from companion.core.timeutil import to_db
from companion.storage.base import VectorRow, text_hash
from companion.storage.sqlite.connection import storage_error
from companion.storage.sqlite.store import SQLiteStore
from companion.storage.vectormath import pack

__all__ = ["VectorRow", "VectorStore", "text_hash"]

log = logging.getLogger(__name__)


# Written only while the memory is still active: an embedding computed outside the lock must not
# resurrect a derived copy of a memory forgotten meanwhile.
_UPSERT = """
INSERT INTO memory_vectors (handle, scope_key, model, dim, text_hash, vector, updated_at)
SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM "{table}" WHERE id = ? AND status = 'active')
ON CONFLICT(handle) DO UPDATE SET scope_key = excluded.scope_key, model = excluded.model, dim = excluded.dim,
    text_hash = excluded.text_hash, vector = excluded.vector, updated_at = excluded.updated_at
"""


# Drivers with extension loading, tried in this order when the standard one has none.
EXTENSION_DRIVERS = ("sqlean", "pysqlite3.dbapi2")

# The scopes' matrices kept for the numpy search, least recently searched dropped first: a scope of 10,000
# memories is 15 MB of 384-dimensional vectors, a typical one of 100 memories 150 KB. Reading every BLOB
# again was most of a search's time at 10,000 memories (BENCHMARKS.md, semantic recall).
MATRIX_CACHE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Matrix:
    """A scope's vectors of one model as read at ``version`` (``vector_versions``): handles and rows."""

    version: int
    handles: Any  # numpy int64 array
    vectors: Any  # numpy float32 array, one row a handle

    @property
    def nbytes(self) -> int:
        return int(self.handles.nbytes + self.vectors.nbytes)


def top_k(matrix: _Matrix, query: Sequence[float], k: int) -> list[tuple[int, float]]:
    """The ``k`` rows most similar to ``query``: (handle, similarity), most similar first, ties by handle
    (as a full sort would give them: every row tied with the k-th is kept until the sort)."""
    import numpy as np

    count = len(matrix.handles)
    if count == 0 or k <= 0:
        return []
    # einsum, not ``@``: a matrix-vector product goes to OpenBLAS, whose threads spin on every core after it
    # (2.4 ms of CPU at 10,000 x 384 on 2 cores, 0.9 ms this way, on the thread that asked).
    scores = np.einsum("ij,j->i", matrix.vectors, np.asarray(query, dtype=np.float32))
    if k < count:
        threshold = scores[np.argpartition(-scores, k - 1)[:k]].min()
        chosen = np.flatnonzero(scores >= threshold)
    else:
        chosen = np.arange(count)
    pairs = sorted(zip(matrix.handles[chosen].tolist(), scores[chosen].tolist(), strict=True),
                   key=lambda item: (-item[1], item[0]))
    return [(int(h), float(v)) for h, v in pairs[:k]]


class VectorStore:
    def __init__(self, store: SQLiteStore, *, sqlite_vec: bool = False,
                 scorer: sqlite3.Connection | None = None, scorer_error: type[Exception] = sqlite3.Error) -> None:
        self._store = store
        self.sqlite_vec = sqlite_vec
        # A separate read-only connection with sqlite-vec (see the module docstring). Used from worker
        # threads one query at a time: no thread of its own, which would keep a process that never closes
        # this store from exiting.
        self._scorer = scorer
        self._scorer_lock = asyncio.Lock()
        self._scorer_error = scorer_error
        self.driver = "sqlite3" if scorer is None else scorer_driver_name(scorer_error)
        self._matrices: OrderedDict[tuple[str, str, int], _Matrix] = OrderedDict()

    @property
    def backend(self) -> str:
        return "sqlite-vec" if self.sqlite_vec else "python"

    @classmethod
    async def open(cls, store: SQLiteStore, *, try_sqlite_vec: bool = True,
                   drivers: Sequence[str] = EXTENSION_DRIVERS) -> VectorStore:
        """A vector store on ``store``'s connection, with sqlite-vec loaded into it if this Python's
        SQLite allows extensions, else into a read-only connection of an optional driver that does
        (``drivers``); with neither, scoring runs in Python (same results)."""
        if not try_sqlite_vec:
            return cls(store)
        if await cls._load_sqlite_vec(store):
            return cls(store, sqlite_vec=True)
        for name in drivers:
            opened = await _open_scorer(name, store.path)
            if opened is not None:
                log.info("vector search by sqlite-vec on a %s connection", name)
                return cls(store, sqlite_vec=True, scorer=opened[0], scorer_error=opened[1])
        log.info("sqlite-vec is not available here; vector search runs in Python")
        return cls(store)

    async def close(self) -> None:
        """Close the scoring connection, if one was opened (the store's own connection is the store's)."""
        if self._scorer is not None:
            scorer, self._scorer = self._scorer, None
            async with self._scorer_lock:
                await asyncio.to_thread(scorer.close)

    @staticmethod
    async def _load_sqlite_vec(store: SQLiteStore) -> bool:
        try:
            path = _sqlite_vec_path()
            async with store.transaction(write=False) as conn:
                await conn.enable_load_extension(True)
                try:
                    await conn.load_extension(path)
                finally:
                    await conn.enable_load_extension(False)
                await conn.execute("SELECT vec_version()")
        except (ImportError, AttributeError, OSError, sqlite3.Error) as exc:
            log.debug("sqlite-vec did not load: %s", exc)
            return False
        return True

    # ---- writes ----------------------------------------------------------------------------------

    async def put(self, scope: Scope, model: str, rows: Sequence[VectorRow], now: datetime) -> int:
        """Store (or replace) vectors of the scope's active memories; returns how many were written."""
        if not rows:
            return 0
        params = [
            (r.handle, scope.key, model, len(r.vector), r.text_hash, pack(r.vector), to_db(now), r.handle)
            for r in rows
        ]
        try:
            async with self._store.transaction() as conn:
                # The cursor's count, not the connection's: that one counts the version triggers' rows too.
                cursor = await conn.executemany(_UPSERT.format(table=self._store.memory_table(scope)), params)
                return max(cursor.rowcount, 0)
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    async def delete(self, handles: Sequence[int]) -> int:
        if not handles:
            return 0
        try:
            async with self._store.transaction() as conn:
                cursor = await conn.execute(
                    f"DELETE FROM memory_vectors WHERE handle IN ({', '.join('?' for _ in handles)})",
                    tuple(int(h) for h in handles),
                )
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc
        self._drop_matrices()
        return max(cursor.rowcount, 0)

    async def prune(self, scope: Scope | None = None) -> int:
        """Drop vectors whose memory is gone or forgotten, of one scope or of every scope that has vectors.
        One short transaction per scope."""
        self._drop_matrices()
        removed = 0
        # Only scopes holding vectors: they have a memory table (a scope never written has none).
        for key in await self._scope_keys(scope):
            table = self._store.memory_table(Scope.from_key(key))
            try:
                async with self._store.transaction() as conn:
                    cursor = await conn.execute(
                        f'DELETE FROM memory_vectors WHERE scope_key = ? AND handle NOT IN '
                        f'(SELECT id FROM "{table}" WHERE status != ?)',
                        (key, Status.FORGOTTEN.value),
                    )
                    removed += max(cursor.rowcount, 0)
            except sqlite3.Error as exc:
                raise storage_error(exc) from exc
        return removed

    async def drop_other_models(self, model: str) -> int:
        """Vectors of any other model can never be compared with this one's: remove them (reindex)."""
        self._drop_matrices()
        try:
            async with self._store.transaction() as conn:
                cursor = await conn.execute("DELETE FROM memory_vectors WHERE model != ?", (model,))
                return max(cursor.rowcount, 0)
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    # ---- reads -----------------------------------------------------------------------------------

    async def _scope_keys(self, scope: Scope | None = None) -> list[str]:
        if scope is not None:
            rows = await self._read("SELECT scope_key FROM memory_vectors WHERE scope_key = ? LIMIT 1", (scope.key,))
        else:
            rows = await self._read("SELECT DISTINCT scope_key FROM memory_vectors ORDER BY scope_key", ())
        return [str(row[0]) for row in rows]

    async def _read(self, sql: str, params: tuple[object, ...]) -> list[sqlite3.Row]:
        try:
            async with self._store.transaction(write=False) as conn:
                cursor = await conn.execute(sql, params)
                return list(await cursor.fetchall())
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    async def hashes(self, scope: Scope, model: str) -> dict[int, str]:
        """Handle -> hash of the text its stored vector was computed from (to skip unchanged memories)."""
        rows = await self._read(
            "SELECT handle, text_hash FROM memory_vectors WHERE scope_key = ? AND model = ?", (scope.key, model)
        )
        return {int(h): str(t) for h, t in rows}

    async def count(self, model: str | None = None) -> int:
        if model is None:
            rows = await self._read("SELECT count(*) FROM memory_vectors", ())
        else:
            rows = await self._read("SELECT count(*) FROM memory_vectors WHERE model = ?", (model,))
        return int(rows[0][0]) if rows else 0

    async def nearest(self, scope: Scope, model: str, query: Sequence[float], k: int) -> list[tuple[int, float]]:
        """The scope's ``k`` memories closest to the (unit) query vector: (handle, cosine similarity),
        most similar first."""
        if k <= 0:
            return []
        if self.sqlite_vec:
            sql = ("SELECT handle, 1.0 - vec_distance_cosine(vector, ?) AS similarity FROM memory_vectors "
                   "WHERE scope_key = ? AND model = ? AND dim = ? ORDER BY similarity DESC, handle LIMIT ?")
            params = (pack(query), scope.key, model, len(query), k)
            if self._scorer is not None:
                return await self._score(sql, params)
            return [(int(h), float(s)) for h, s in await self._read(sql, params)]
        return top_k(await self._matrix(scope, model, len(query)), query, k)

    async def _matrix(self, scope: Scope, model: str, dim: int) -> _Matrix:
        """The scope's vectors of ``model``: from memory while the scope's version stands, else read again.
        The version is read first: rows read after it are at least as new, so a stale matrix is never kept
        under a current version."""
        import numpy as np

        key = (scope.key, model, dim)
        try:
            async with self._store.transaction(write=False) as conn:
                cursor = await conn.execute(
                    "SELECT version FROM vector_versions WHERE scope_key = ? AND model = ?", (scope.key, model))
                found = await cursor.fetchone()
                version = int(found[0]) if found else 0
                cached = self._matrices.get(key)
                if cached is not None and cached.version == version:
                    self._matrices.move_to_end(key)
                    return cached
                cursor = await conn.execute(
                    "SELECT handle, vector FROM memory_vectors WHERE scope_key = ? AND model = ? AND dim = ?",
                    (scope.key, model, dim))
                rows = list(await cursor.fetchall())
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc
        matrix = _Matrix(version, np.fromiter((int(h) for h, _ in rows), dtype=np.int64, count=len(rows)),
                         np.frombuffer(b"".join(bytes(b) for _, b in rows), dtype=np.float32).reshape(len(rows), dim))
        self._keep(key, matrix)
        return matrix

    def _keep(self, key: tuple[str, str, int], matrix: _Matrix) -> None:
        self._matrices.pop(key, None)
        if matrix.nbytes > MATRIX_CACHE_BYTES:
            return
        self._matrices[key] = matrix
        total = sum(m.nbytes for m in self._matrices.values())
        while total > MATRIX_CACHE_BYTES:
            _, dropped = self._matrices.popitem(last=False)
            total -= dropped.nbytes

    def _drop_matrices(self) -> None:
        """Vectors were deleted here: no copy of them stays in memory until the next search notices."""
        self._matrices.clear()


    async def _score(self, sql: str, params: tuple[object, ...]) -> list[tuple[int, float]]:
        scorer = self._scorer
        assert scorer is not None

        def run() -> list[tuple[int, float]]:
            return [(int(h), float(s)) for h, s in scorer.execute(sql, params).fetchall()]

        try:
            async with self._scorer_lock:
                return await asyncio.to_thread(run)
        except self._scorer_error as exc:
            raise storage_error(sqlite3.Error(str(exc))) from exc


def _sqlite_vec_path() -> str:
    return str(importlib.import_module("sqlite_vec").loadable_path())


def scorer_driver_name(error: type[Exception]) -> str:
    return error.__module__.split(".")[0]


async def _open_scorer(driver: str, path: object) -> tuple[sqlite3.Connection, type[Exception]] | None:
    """A read-only connection of ``driver`` to the database file with sqlite-vec loaded, and the driver's
    error class; None when the driver or sqlite-vec is missing or the file is not on disk."""
    try:
        module = importlib.import_module(driver)
        extension = _sqlite_vec_path()
    except (ImportError, AttributeError, OSError) as exc:
        log.debug("no %s with sqlite-vec: %s", driver, exc)
        return None
    error: type[Exception] = module.Error
    if not isinstance(path, Path) or not path.is_file():
        return None  # an in-memory store has no file a second connection could read

    def connect() -> sqlite3.Connection:
        conn = module.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False,
                              isolation_level=None)
        try:
            conn.enable_load_extension(True)
            conn.load_extension(extension)
            conn.enable_load_extension(False)
            conn.execute("SELECT vec_version()")
        except BaseException:
            conn.close()
            raise
        return conn  # type: ignore[no-any-return]

    try:
        return await asyncio.to_thread(connect), error
    except (error, OSError) as exc:
        log.debug("sqlite-vec did not load on %s: %s", driver, exc)
        return None
