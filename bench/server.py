"""A server database for a benchmark run: a schema of its own on the server a ``postgresql://`` URL names
(created, handed over as a URL whose connections work in it, dropped at the end), and its size. Talks to
the server directly (asyncpg): the engine under measure reaches it only through ``open_store``."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlsplit


@asynccontextmanager
async def server_schema(url: str, prefix: str) -> AsyncIterator[str]:
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f'CREATE SCHEMA "{name}"')
        try:
            yield f"{url}{'&' if '?' in url else '?'}search_path={name}"
        finally:
            await admin.execute(f'DROP SCHEMA "{name}" CASCADE')
    finally:
        await admin.close()


async def server_size_mb(url: str) -> float:
    """Tables and indexes of the URL's schema (``search_path``), in MB."""
    import asyncpg

    schema = parse_qs(urlsplit(url).query).get("search_path", ["public"])[0]
    conn = await asyncpg.connect(url)
    try:
        size = await conn.fetchval("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class AS c "
                                   "JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = $1 "
                                   "AND c.relkind = 'r'", schema)
    finally:
        await conn.close()
    return round(int(size) / 2**20, 3)
