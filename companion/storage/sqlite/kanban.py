"""The Dida365 kanban's own tables: one link row per linked user and one card row per synced memory.

The table owner ``dida`` has its migration set here (``DIDA``, registered with ``migrations``); ``sqlite``
imports this module so every store has the tables. Rows are opaque text the kanban package encodes (its
link and card records, the access token already encrypted): storage knows nothing of Dida365. A card row is
keyed by (user, memory handle); forgetting a user's link drops their card rows in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping

from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.sqlite.connection import Connection
from companion.storage.sqlite.migrations import register

DIDA = MigrationSet("dida", (
    Migration("0001_links_and_cards", """
    CREATE TABLE dida_links (
        user_id INTEGER PRIMARY KEY,
        data TEXT NOT NULL
    );
    CREATE TABLE dida_cards (
        user_id INTEGER NOT NULL,
        handle INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (user_id, handle)
    ) WITHOUT ROWID
    """),
))
register(DIDA)


class KanbanTables(Connection):
    """The ``KanbanState`` methods of ``SQLiteStore``: each one short transaction or one read."""

    async def dida_link(self, user_id: int) -> str | None:
        rows = await self._select("SELECT data FROM dida_links WHERE user_id = ?", (int(user_id),))
        return str(rows[0][0]) if rows else None

    async def put_dida_link(self, user_id: int, data: str | None) -> None:
        async with self._tx() as conn:
            if data is None:
                await conn.execute("DELETE FROM dida_cards WHERE user_id = ?", (int(user_id),))
                await conn.execute("DELETE FROM dida_links WHERE user_id = ?", (int(user_id),))
            else:
                await conn.execute("INSERT INTO dida_links (user_id, data) VALUES (?, ?) "
                                   "ON CONFLICT(user_id) DO UPDATE SET data = excluded.data", (int(user_id), data))

    async def dida_users(self) -> list[int]:
        return [int(r[0]) for r in await self._select("SELECT user_id FROM dida_links ORDER BY user_id")]

    async def dida_cards(self, user_id: int) -> dict[int, str]:
        rows = await self._select("SELECT handle, data FROM dida_cards WHERE user_id = ?", (int(user_id),))
        return {int(handle): str(data) for handle, data in rows}

    async def put_dida_cards(self, user_id: int, cards: Mapping[int, str | None]) -> None:
        if not cards:
            return
        async with self._tx() as conn:
            await conn.executemany("DELETE FROM dida_cards WHERE user_id = ? AND handle = ?",
                                   [(int(user_id), int(h)) for h, d in cards.items() if d is None])
            await conn.executemany(
                "INSERT INTO dida_cards (user_id, handle, data) VALUES (?, ?, ?) "
                "ON CONFLICT(user_id, handle) DO UPDATE SET data = excluded.data",
                [(int(user_id), int(h), d) for h, d in cards.items() if d is not None])
