"""The nightly backup of a million memories on PostgreSQL (issue 19 section 3: <= 30 s), beside the plainest
read of the same rows: ``python -m bench pgbulk --database-url postgresql://127.0.0.1/test``.

In a schema of its own (dropped at the end): ``--scopes`` x ``--per-scope`` rows loaded with one
``INSERT ... SELECT`` (docs/benchmarks-history.md section 12 did the same for decay), then ``make_backup`` through
``open_store`` as the bot's job calls it, then the server's own ``COPY ... TO STDOUT (FORMAT csv)`` of the
raw rows into one file (no formatting, no file per scope: the floor of reading them). Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from bench.server import server_schema, server_size_mb

NOW = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)
# Whole seconds, as every writer stores them; texts and keywords vary by row, a few formula-like ones.
LOAD = """
INSERT INTO scopes (user_id, chat_id, created_at)
SELECT u, CASE WHEN u % 10 = 0 THEN -100000 - u ELSE 0 END, $1 FROM generate_series(1, $2) AS u;
"""
LOAD_MEMORIES = """
INSERT INTO memories (user_id, chat_id, event, keywords, importance, created_at, validity, last_mentioned_at,
    updated_at, expires_at, type, origin, mention_count, last_decay_at, terms, status, tier, review_at,
    last_accessed_at, access_count, pinned, source_chat_id, source_message_id, source_at, superseded_by,
    status_reason, fingerprint)
SELECT s.user_id, s.chat_id,
    CASE WHEN n % 50 = 0 THEN '=' ELSE '' END || '用户' || s.user_id || '喜欢第' || n || '种奶茶，周末常去公园散步',
    ARRAY['奶茶' || n % 17, '公园', '散步' || n % 5], 10 + (n * 7919 % 9000) / 100.0,
    $1::timestamptz - make_interval(days => n % 300), (ARRAY['permanent', '30d', '7d'])[1 + n % 3],
    CASE WHEN n % 4 = 0 THEN NULL ELSE $1::timestamptz - make_interval(days => n % 30) END,
    $1::timestamptz - make_interval(days => n % 200), NULL, 'fact', 'extracted', n % 4,
    $1::timestamptz - make_interval(days => 1), ARRAY['奶茶', '公园'],
    CASE WHEN n % 25 = 0 THEN 'forgotten' ELSE 'active' END, (ARRAY['short', 'medium', 'long'])[1 + n % 3],
    NULL, NULL, 0, n % 20 = 0, NULLIF(s.chat_id, 0), n, $1::timestamptz, NULL,
    CASE WHEN n % 25 = 0 THEN 'user' ELSE '' END, ''
FROM scopes AS s CROSS JOIN generate_series(1, $2) AS n;
"""


async def run(url: str, scopes: int, per_scope: int, zone: str) -> dict[str, Any]:
    import asyncpg

    from companion.engine.maintenance_port import MaintenancePort
    from companion.ops.backup.nightly import make_backup
    from companion.storage.factory import open_store

    report: dict[str, Any] = {"scopes": scopes, "per_scope": per_scope, "zone": zone}
    async with server_schema(url, "bench_pgbulk") as schema_url:
        store = await open_store(schema_url)  # the schema's migrations
        conn = await asyncpg.connect(schema_url)
        try:
            started = time.perf_counter()
            await conn.execute(LOAD.replace("$1", "'2026-11-25 04:00:00+00'").replace("$2", str(scopes)))
            await conn.execute(LOAD_MEMORIES, NOW, per_scope)
            await conn.execute("ANALYZE memories")
            report["load_s"] = round(time.perf_counter() - started, 2)
            report["rows"] = int(await conn.fetchval("SELECT count(*) FROM memories"))
            report["db_mb"] = await server_size_mb(schema_url)
            with tempfile.TemporaryDirectory(prefix="bench-pgbulk-") as tmp:
                started = time.perf_counter()
                result = await make_backup(MaintenancePort(store), Path(tmp) / "backups", NOW, ZoneInfo(zone),
                                           keep_days=7)
                report["backup_s"] = round(time.perf_counter() - started, 2)
                report["backup"] = {"files": result.files, "rows": result.rows, "users": result.users}
                started = time.perf_counter()
                await conn.copy_from_query("SELECT * FROM memories ORDER BY user_id, chat_id, id",
                                           output=Path(tmp) / "plain.csv", format="csv")
                report["plain_copy_s"] = round(time.perf_counter() - started, 2)
        finally:
            await conn.close()
            await store.close()
    report["per_million_s"] = round(report["backup_s"] * 1_000_000 / max(report["rows"], 1), 1)
    return report


def run_command(args: argparse.Namespace) -> int:
    report = asyncio.run(run(args.database_url, args.scopes, args.per_scope, args.zone))
    report["at"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0
