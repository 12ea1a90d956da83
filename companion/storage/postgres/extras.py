"""The PostgreSQL store's optional capabilities: the memory vectors for semantic recall (float32 bytes in
``memory_vectors``, scored by one numpy matrix product over the scope's rows, as SQLite's Python path
does: a scope holds hundreds of vectors, not millions) and the LLM usage log (``llm_usage``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from companion.core.models import Scope
from companion.core.usage import UsageRecord
from companion.storage.base import UsageCell, VectorRow
from companion.storage.postgres.row_codec import key, second
from companion.storage.vectormath import pack, similarities

if TYPE_CHECKING:  # a run-time import would be circular: store -> extras
    from companion.storage.postgres.store import PostgresStore

# Written only while the memory is still active: an embedding computed outside any transaction must not
# bring back a derived copy of a memory forgotten meanwhile.
_UPSERT = """
INSERT INTO memory_vectors (handle, user_id, chat_id, model, dim, text_hash, vector, updated_at)
SELECT v.handle, $2, $3, $4, v.dim, v.hash, v.vector, $5
FROM unnest($1::bigint[], $6::integer[], $7::text[], $8::bytea[]) AS v(handle, dim, hash, vector)
WHERE EXISTS (SELECT 1 FROM memories AS m WHERE m.id = v.handle AND m.user_id = $2 AND m.chat_id = $3
    AND m.status = 'active')
ON CONFLICT (handle) DO UPDATE SET user_id = excluded.user_id, chat_id = excluded.chat_id, model = excluded.model,
    dim = excluded.dim, text_hash = excluded.text_hash, vector = excluded.vector, updated_at = excluded.updated_at
RETURNING 1
"""


class PgVectors:
    """``VectorIndex`` in the store's database; one scope's search never reads another scope's rows."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    @property
    def backend(self) -> str:
        return "numpy"

    async def close(self) -> None:
        return None  # the pool is the store's

    async def put(self, scope: Scope, model: str, rows: Sequence[VectorRow], now: datetime) -> int:
        if not rows:
            return 0
        written = await self._store._fetch(
            _UPSERT, [r.handle for r in rows], *key(scope), model, second(now), [len(r.vector) for r in rows],
            [r.text_hash for r in rows], [pack(r.vector) for r in rows])
        return len(written)

    async def delete(self, handles: Sequence[int]) -> int:
        if not handles:
            return 0
        rows = await self._store._fetch("DELETE FROM memory_vectors WHERE handle = ANY($1::bigint[]) RETURNING 1",
                                        [int(h) for h in handles])
        return len(rows)

    async def prune(self, scope: Scope | None = None) -> int:
        """Drop vectors whose memory is gone, forgotten or no longer the scope's."""
        where = "" if scope is None else "v.user_id = $1 AND v.chat_id = $2 AND "
        rows = await self._store._fetch(
            f"DELETE FROM memory_vectors AS v WHERE {where}NOT EXISTS (SELECT 1 FROM memories AS m "
            "WHERE m.id = v.handle AND m.user_id = v.user_id AND m.chat_id = v.chat_id AND m.status != 'forgotten') "
            "RETURNING 1",
            *(() if scope is None else key(scope)))
        return len(rows)

    async def drop_other_models(self, model: str) -> int:
        rows = await self._store._fetch("DELETE FROM memory_vectors WHERE model != $1 RETURNING 1", model)
        return len(rows)

    async def hashes(self, scope: Scope, model: str) -> dict[int, str]:
        rows = await self._store._fetch("SELECT handle, text_hash FROM memory_vectors WHERE user_id = $1 "
                                        "AND chat_id = $2 AND model = $3", *key(scope), model)
        return {int(h): str(t) for h, t in rows}

    async def count(self, model: str | None = None) -> int:
        if model is None:
            return int(await self._store._value("SELECT count(*) FROM memory_vectors") or 0)
        return int(await self._store._value("SELECT count(*) FROM memory_vectors WHERE model = $1", model) or 0)

    async def nearest(self, scope: Scope, model: str, query: Sequence[float], k: int) -> list[tuple[int, float]]:
        if k <= 0:
            return []
        rows = await self._store._fetch("SELECT handle, vector FROM memory_vectors WHERE user_id = $1 AND chat_id = $2 "
                                        "AND model = $3 AND dim = $4", *key(scope), model, len(query))
        scored = list(zip((int(r[0]) for r in rows), similarities([bytes(r[1]) for r in rows], query), strict=True))
        scored.sort(key=lambda item: (-item[1], item[0]))
        return scored[:k]


class PgUsageLog:
    """``UsageLog`` in the store's database (table ``llm_usage``); one INSERT per call, after it answered."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    async def add(self, row: UsageRecord) -> None:
        await self._store._fetch(
            "INSERT INTO llm_usage (at, purpose, model, prompt_tokens, completion_tokens, cache_hit_tokens, "
            "cache_miss_tokens, latency_ms, ok, tool_calls) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            second(row.at), row.purpose, row.model, row.prompt_tokens, row.completion_tokens, row.cache_hit_tokens,
            row.cache_miss_tokens, row.latency_ms, row.ok, row.tool_calls)

    async def report(self, since: datetime, offset: timedelta) -> list[UsageCell]:
        """Calls since ``since`` by local day (cut at ``offset`` from UTC) and purpose, oldest day first."""
        rows = await self._store._fetch(
            "SELECT to_char(at + make_interval(secs => $2), 'YYYY-MM-DD') AS day, purpose, count(*), "
            "count(*) FILTER (WHERE NOT ok), sum(prompt_tokens), sum(completion_tokens), "
            "coalesce(sum(cache_hit_tokens), 0), coalesce(sum(cache_miss_tokens), 0), avg(latency_ms), "
            "sum(tool_calls) FROM llm_usage WHERE at >= $1 GROUP BY day, purpose ORDER BY day, purpose",
            second(since), offset.total_seconds())
        return [UsageCell(str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5]), int(r[6]), int(r[7]),
                          round(float(r[8]), 1), int(r[9])) for r in rows]

    async def page(self, after: int, limit: int) -> list[tuple[int, UsageRecord]]:
        rows = await self._store._fetch(
            "SELECT id, at, purpose, model, prompt_tokens, completion_tokens, cache_hit_tokens, cache_miss_tokens, "
            "latency_ms, ok, tool_calls FROM llm_usage WHERE id > $1 ORDER BY id LIMIT $2", after, limit)
        return [(int(r[0]), UsageRecord(*r[1:])) for r in rows]
