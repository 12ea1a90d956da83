"""Memory vectors for semantic recall, in the memories' own SQLite database (table ``memory_vectors``).

Rows are keyed by the memory handle and tagged with the scope and the embedding model, so a scope's search
never sees another scope's vectors and vectors of a replaced model are never compared with new ones. The
vectors are L2-normalised float32 BLOBs; scoring is cosine similarity, by sqlite-vec's
``vec_distance_cosine`` where the extension loads on this Python's SQLite, otherwise by a brute-force dot
product in plain Python (a scope holds hundreds of memories, not millions). Both read the same table.

Every method is one short transaction on the store's own connection (``SQLiteStore.transaction``), so
vector writes never wait on an embedding call and do not look like another process's commits.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import operator
import sqlite3
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from companion.core.models import Scope, Status
from companion.core.timeutil import to_db
from companion.storage.sqlite import SQLiteStore, storage_error

log = logging.getLogger(__name__)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pack(vector: Sequence[float]) -> bytes:
    return array("f", vector).tobytes()


def unpack(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    return values


# Python 3.12+ has a C dot product (several times faster); 3.11 sums the products.
_SUMPROD: Callable[[Sequence[float], Sequence[float]], float] | None = getattr(math, "sumprod", None)


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    if _SUMPROD is not None:
        return float(_SUMPROD(a, b))
    return float(sum(map(operator.mul, a, b)))


@dataclass(frozen=True, slots=True)
class VectorRow:
    handle: int
    text_hash: str
    vector: Sequence[float]


# Written only while the memory is still active: an embedding computed outside the lock must not
# resurrect a derived copy of a memory forgotten meanwhile.
_UPSERT = """
INSERT INTO memory_vectors (handle, scope_key, model, dim, text_hash, vector, updated_at)
SELECT ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM "{table}" WHERE id = ? AND status = 'active')
ON CONFLICT(handle) DO UPDATE SET scope_key = excluded.scope_key, model = excluded.model, dim = excluded.dim,
    text_hash = excluded.text_hash, vector = excluded.vector, updated_at = excluded.updated_at
"""


class VectorStore:
    def __init__(self, store: SQLiteStore, *, sqlite_vec: bool = False) -> None:
        self._store = store
        self.sqlite_vec = sqlite_vec

    @property
    def backend(self) -> str:
        return "sqlite-vec" if self.sqlite_vec else "python"

    @classmethod
    async def open(cls, store: SQLiteStore, *, try_sqlite_vec: bool = True) -> VectorStore:
        """A vector store on ``store``'s connection, with sqlite-vec loaded into it if this Python's
        SQLite allows extensions (many builds do not: then scoring runs in Python, same results)."""
        loaded = try_sqlite_vec and await cls._load_sqlite_vec(store)
        if try_sqlite_vec and not loaded:
            log.info("sqlite-vec is not available here; vector search runs in Python")
        return cls(store, sqlite_vec=loaded)

    @staticmethod
    async def _load_sqlite_vec(store: SQLiteStore) -> bool:
        try:
            module = importlib.import_module("sqlite_vec")
            path = str(module.loadable_path())
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
                before = conn.total_changes
                await conn.executemany(_UPSERT.format(table=scope.table), params)
                return conn.total_changes - before
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
                return max(cursor.rowcount, 0)
        except sqlite3.Error as exc:
            raise storage_error(exc) from exc

    async def prune(self, scope: Scope | None = None) -> int:
        """Drop vectors whose memory is gone or forgotten, of one scope or of every scope that has vectors.
        One short transaction per scope."""
        removed = 0
        # Only scopes holding vectors: they have a memory table (a scope never written has none).
        for key in await self._scope_keys(scope):
            table = Scope.from_key(key).table
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
            rows = await self._read(
                "SELECT handle, 1.0 - vec_distance_cosine(vector, ?) AS similarity FROM memory_vectors "
                "WHERE scope_key = ? AND model = ? AND dim = ? ORDER BY similarity DESC, handle LIMIT ?",
                (pack(query), scope.key, model, len(query), k),
            )
            return [(int(h), float(s)) for h, s in rows]
        rows = await self._read(
            "SELECT handle, vector FROM memory_vectors WHERE scope_key = ? AND model = ? AND dim = ?",
            (scope.key, model, len(query)),
        )
        scored = [(int(handle), dot(unpack(blob), query)) for handle, blob in rows]
        scored.sort(key=lambda item: (-item[1], item[0]))
        return scored[:k]

