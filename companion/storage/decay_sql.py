"""Daily decay and cleanup of one memory table as set-based SQL: the rules of ``core.rules`` (``decay``,
``removal_reason``, ``decays``) written as expressions, so a million rows cost a few statements per table
instead of a Python call per row. ``tests/test_decay_sql.py`` checks the SQL against the Python rules.

Times are stored as fixed-width UTC text; ``unixepoch()`` turns them into whole seconds, so whole days
and the mention window are computed exactly as the Python rules compute them.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import datetime

import aiosqlite

from companion.core import rules
from companion.core.timeutil import to_db

DAY_S = 86_400
WINDOW_S = int(rules.MENTION_WINDOW.total_seconds())

# Rows that decay at all: the exemptions of ``rules.decays``.
_DECAYING = "status = 'active' AND validity != 'permanent' AND tier != 'long' AND pinned = 0"

# Whole days since the anchor, and how many of them end inside the mention window (rules.decay).
_DECAY = f"""
UPDATE "{{table}}" AS t SET
    importance = max({rules.MIN_IMPORTANCE}, min({rules.MAX_IMPORTANCE},
        t.importance * (pow({rules.DECAY_PER_DAY_MENTIONED}, d.slow) * pow({rules.DECAY_PER_DAY}, d.days - d.slow)))),
    last_decay_at = strftime('%Y-%m-%dT%H:%M:%SZ', unixepoch(t.last_decay_at) + d.days * {DAY_S}, 'unixepoch')
FROM (
    SELECT id, days, CASE WHEN m IS NULL THEN 0 ELSE max(0,
        min(days, floor((m + {WINDOW_S} - a) / {float(DAY_S)})) - max(1, ceil((m - a) / {float(DAY_S)})) + 1)
    END AS slow
    FROM (
        SELECT id, unixepoch(last_decay_at) AS a, unixepoch(last_mentioned_at) AS m,
               (:now - unixepoch(last_decay_at)) / {DAY_S} AS days
        FROM "{{table}}" WHERE {_DECAYING} AND last_decay_at <= :day_ago
    )
) AS d
WHERE t.id = d.id AND d.days > 0
"""

# Cleanup leaves a content-free tombstone: the text goes, the handle, time and reason stay.
_TOMBSTONE = "event = '', keywords = '', terms = '', status = 'forgotten', updated_at = :stamp"
_CLEAN = f"""
UPDATE "{{table}}" SET {_TOMBSTONE},
    status_reason = CASE WHEN importance < {rules.CLEANUP_BELOW} THEN 'faded' ELSE 'expired' END
WHERE {_DECAYING} AND (importance < {rules.CLEANUP_BELOW} OR (expires_at IS NOT NULL AND expires_at <= :stamp
    AND (last_mentioned_at IS NULL OR last_mentioned_at <= :week_ago)))
"""
# A lower-value copy of the same event text is noise (the higher one, or the newer of equals, stays).
_DUPLICATES = f"""
UPDATE "{{table}}" SET {_TOMBSTONE}, status_reason = 'duplicate'
WHERE {_DECAYING} AND EXISTS (
    SELECT 1 FROM "{{table}}" AS o WHERE o.event = "{{table}}".event AND o.status = 'active' AND o.id != "{{table}}".id
    AND (o.importance > "{{table}}".importance OR (o.importance = "{{table}}".importance AND o.id > "{{table}}".id)))
"""


async def decay_table(conn: aiosqlite.Connection, table: str, now: datetime) -> tuple[int, int]:
    """Decay and clean one table inside the caller's transaction; returns (rows decayed, rows removed).

    ``table`` is always ``Scope.table`` (validated integers). Running twice on one day changes nothing."""
    stamp = to_db(now)
    params = {"now": int(now.timestamp()), "day_ago": to_db(now - rules.DAY)}
    cursor = await conn.execute(_DECAY.format(table=table), params)
    decayed = max(cursor.rowcount, 0)
    clean = {"stamp": stamp, "week_ago": to_db(now - rules.MENTION_WINDOW)}
    cursor = await conn.execute(_CLEAN.format(table=table), clean)
    removed = max(cursor.rowcount, 0)
    cursor = await conn.execute(_DUPLICATES.format(table=table), {"stamp": stamp})
    return decayed, removed + max(cursor.rowcount, 0)


async def ensure_math(conn: aiosqlite.Connection) -> None:
    """SQLite builds without the math functions get Python ones (slower, same results)."""
    try:
        await conn.execute("SELECT pow(2, 2), floor(1.5), ceil(1.5)")
    except sqlite3.OperationalError:
        await conn.create_function("pow", 2, math.pow, deterministic=True)
        await conn.create_function("floor", 1, math.floor, deterministic=True)
        await conn.create_function("ceil", 1, math.ceil, deterministic=True)
