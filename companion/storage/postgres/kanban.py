"""The Dida365 kanban's own tables on PostgreSQL (their migration set ``dida`` is in ``schema``, as
``storage/sqlite/kanban.py`` has SQLite's): one link row per linked user and one card row per synced memory, opaque
text the kanban package encodes."""

from __future__ import annotations

from collections.abc import Mapping

from companion.storage.postgres.pool import Pool


class KanbanTables(Pool):
    """The ``KanbanState`` methods of ``PostgresStore``: each one short transaction or one read."""

    async def dida_link(self, user_id: int) -> str | None:
        value = await self._value("SELECT data FROM dida_links WHERE user_id = $1", int(user_id))
        return None if value is None else str(value)

    async def put_dida_link(self, user_id: int, data: str | None) -> None:
        async with self._tx() as conn:
            if data is None:
                await conn.execute("DELETE FROM dida_cards WHERE user_id = $1", int(user_id))
                await conn.execute("DELETE FROM dida_links WHERE user_id = $1", int(user_id))
            else:
                await conn.execute("INSERT INTO dida_links (user_id, data) VALUES ($1, $2) "
                                   "ON CONFLICT (user_id) DO UPDATE SET data = excluded.data", int(user_id), data)

    async def dida_users(self) -> list[int]:
        return [int(r[0]) for r in await self._fetch("SELECT user_id FROM dida_links ORDER BY user_id")]

    async def dida_cards(self, user_id: int) -> dict[int, str]:
        rows = await self._fetch("SELECT handle, data FROM dida_cards WHERE user_id = $1", int(user_id))
        return {int(r[0]): str(r[1]) for r in rows}

    async def put_dida_cards(self, user_id: int, cards: Mapping[int, str | None]) -> None:
        if not cards:
            return
        async with self._tx() as conn:
            gone = [(int(user_id), int(h)) for h, d in cards.items() if d is None]
            kept = [(int(user_id), int(h), d) for h, d in cards.items() if d is not None]
            if gone:
                await conn.executemany("DELETE FROM dida_cards WHERE user_id = $1 AND handle = $2", gone)
            if kept:
                await conn.executemany(
                    "INSERT INTO dida_cards (user_id, handle, data) VALUES ($1, $2, $3) "
                    "ON CONFLICT (user_id, handle) DO UPDATE SET data = excluded.data", kept)
