"""Daily decay and cleanup of one memory table as set-based SQL: the rules of ``core.rules`` (``decay``,
``removal_reason``, ``decays``) written as expressions, so a million rows cost a few statements per table
instead of a Python call per row. ``tests/test_store_contract.py`` checks the SQL against the Python rules, row by row.

Times are stored as fixed-width UTC text; ``unixepoch()`` turns them into whole seconds, so whole days
and the mention window are computed exactly as the Python rules compute them.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Sequence
from datetime import datetime

import aiosqlite

from companion.core import rules
from companion.core.changes import ChangeOp
from companion.core.models import StatusReason
from companion.core.timeutil import to_db

DAY_S = 86_400
_KEY = re.compile(r"(c[np][0-9]+_)?u[0-9]+")  # ``Scope.key``: u<user>, or c<n|p><chat>_u<user> in a group
WINDOW_S = int(rules.MENTION_WINDOW.total_seconds())

# Rows that decay at all: the exemptions of ``rules.decays``.
_DECAYING = "status = 'active' AND validity != 'permanent' AND tier != 'long' AND pinned = 0"

# Whole days since the anchor, and how many of them end inside the mention window (rules.decay), inline:
# one UPDATE with no join, about a fifth cheaper than joining a subquery that computes them once.
_DAYS = f"((:now - unixepoch(last_decay_at)) / {DAY_S})"
_SLOW = (f"(CASE WHEN last_mentioned_at IS NULL THEN 0 ELSE max(0, min({_DAYS}, "
         f"floor((unixepoch(last_mentioned_at) + {WINDOW_S} - unixepoch(last_decay_at)) / {float(DAY_S)})) "
         f"- max(1, ceil((unixepoch(last_mentioned_at) - unixepoch(last_decay_at)) / {float(DAY_S)})) + 1) END)")
DECAY = f"""
UPDATE "{{table}}" SET
    importance = max({rules.MIN_IMPORTANCE}, min({rules.MAX_IMPORTANCE}, importance
        * pow({rules.DECAY_PER_DAY_MENTIONED}, {_SLOW}) * pow({rules.DECAY_PER_DAY}, {_DAYS} - {_SLOW}))),
    last_decay_at = strftime('%Y-%m-%dT%H:%M:%SZ', unixepoch(last_decay_at) + {_DAYS} * {DAY_S}, 'unixepoch')
WHERE {_DECAYING} AND last_decay_at <= :day_ago
"""


def _cleanable(row: str) -> str:
    """``rules.removal_reason`` is not None: faded, or expired and not mentioned in the last week."""
    return (f"({row}.importance < {rules.CLEANUP_BELOW} OR ({row}.expires_at IS NOT NULL AND {row}.expires_at <= "
            f":stamp AND ({row}.last_mentioned_at IS NULL OR {row}.last_mentioned_at <= :week_ago)))")


def _decaying(row: str) -> str:
    return f"({row}.validity != 'permanent' AND {row}.tier != 'long' AND {row}.pinned = 0)"


# Cleanup leaves a content-free tombstone: the text and importance go, the handle, time and reason stay. A lower-value
# copy of the same event text is noise too (the higher one, or the newer of equals, stays), unless that
# copy is itself cleaned up now. One statement: SQLite decides which rows change before changing any.
# Tables have no index on the text (one schema entry per user): the texts told more than once are found
# by one grouping pass, and only their rows look for a better copy.
CLEAN = f"""
UPDATE "{{table}}" AS t SET event = '', keywords = '', terms = '', happens = NULL, importance = 0, status = 'forgotten',
    updated_at = :stamp,
    status_reason = CASE WHEN t.importance < {rules.CLEANUP_BELOW} THEN '{StatusReason.FADED}'
                         WHEN {_cleanable("t")} THEN '{StatusReason.EXPIRED}' ELSE '{StatusReason.DUPLICATE}' END
WHERE t.status = 'active' AND {_decaying("t")} AND ({_cleanable("t")} OR (t.event IN (
    SELECT event FROM "{{table}}" WHERE status = 'active' GROUP BY event HAVING count(*) > 1) AND EXISTS (
    SELECT 1 FROM "{{table}}" AS o WHERE o.event = t.event AND o.status = 'active' AND o.id != t.id
    AND (o.importance > t.importance OR (o.importance = t.importance AND o.id > t.id))
    AND NOT ({_decaying("o")} AND {_cleanable("o")}))))
"""


def _params(now: datetime) -> dict[str, int | str]:
    return {"now": int(now.timestamp()), "day_ago": to_db(now - rules.DAY), "stamp": to_db(now),
            "week_ago": to_db(now - rules.MENTION_WINDOW)}


# ---- many tables in one trip ---------------------------------------------------------------------
# A statement sent through aiosqlite costs a trip to its thread and back (~90 us); two per table were 2 of
# the 7 s of a decay over 10,000 tables. A slice of tables goes as one script instead: its own
# transaction, each statement's changed rows counted into a temporary table, read once at the end.

COUNTS = "decay_counts"
START = (f"CREATE TEMP TABLE IF NOT EXISTS {COUNTS} "
         "(slice INTEGER NOT NULL, scope_key TEXT NOT NULL, decayed INTEGER NOT NULL, removed INTEGER NOT NULL); "
         f"DELETE FROM temp.{COUNTS}")
TOTALS = f"SELECT total(decayed), total(removed) FROM temp.{COUNTS}"

# The journal (``journal.py``): one entry per memory cleanup removed, found by the stamp CLEAN gives it;
# the counts row drives the loop (CROSS JOIN keeps it outside), so a table nothing was removed from is
# not scanned again. Decay that only lowers importances is one scope-wide entry per scope, not per row.
JOURNAL_CLEANED = f"""
INSERT INTO memory_changes (scope_key, handle, op, at)
SELECT '{{key}}', t.id, '{ChangeOp.CLEANED}', :stamp FROM temp.{COUNTS} AS k CROSS JOIN "{{table}}" AS t
WHERE k.slice = :slice AND k.scope_key = '{{key}}' AND k.removed > 0 AND t.status = 'forgotten'
AND t.updated_at = :stamp AND t.status_reason IN ('{StatusReason.FADED}', '{StatusReason.EXPIRED}',
'{StatusReason.DUPLICATE}') ORDER BY t.id
"""
JOURNAL_DECAYED = f"""
INSERT INTO memory_changes (scope_key, handle, op, at)
SELECT scope_key, NULL, '{ChangeOp.DECAYED}', :stamp FROM temp.{COUNTS} WHERE slice = :slice AND decayed > 0
ORDER BY scope_key
"""
_PARAM = re.compile(r":([a-z_]+)")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _literal(value: int | str) -> str:
    # Scripts take no parameters: the values are inlined, and only these two harmless shapes ever are.
    if isinstance(value, int):
        return str(value)
    if not _STAMP.fullmatch(value):
        raise ValueError(f"not a stored time: {value!r}")
    return f"'{value}'"


def _bind(sql: str, params: dict[str, int | str]) -> str:
    return _PARAM.sub(lambda m: _literal(params[m.group(1)]), sql)


def slice_script(number: int, tables: Sequence[tuple[str, str]], now: datetime) -> str:
    """One transaction decaying and cleaning each (scope key, table), the changed rows counted per table
    in ``temp.decay_counts`` under this slice's number, profiles of scopes that lost memories marked for a
    rebuild, the journal written (``JOURNAL_CLEANED``, ``JOURNAL_DECAYED``). Keys and tables come from
    ``Scope`` (validated)."""
    params = _params(now)
    decay, clean = _bind(DECAY, params), _bind(CLEAN, params)
    cleaned = _bind(JOURNAL_CLEANED, {**params, "slice": number})
    statements = ["BEGIN IMMEDIATE"]
    for key, table in tables:
        if not _KEY.fullmatch(key):
            raise ValueError(f"not a scope key: {key!r}")
        statements += [decay.format(table=table),
                       f"INSERT INTO temp.{COUNTS} VALUES ({number}, '{key}', changes(), 0)",
                       clean.format(table=table),
                       f"INSERT INTO temp.{COUNTS} VALUES ({number}, '{key}', 0, changes())",
                       cleaned.format(table=table, key=key)]
    statements += [f"UPDATE profiles SET dirty = 1 WHERE scope_key IN (SELECT scope_key FROM temp.{COUNTS} "
                   f"WHERE slice = {number} AND removed > 0)",
                   _bind(JOURNAL_DECAYED, {**params, "slice": number}), "COMMIT"]
    return ";\n".join(statements) + ";"


async def ensure_math(conn: aiosqlite.Connection) -> None:
    """SQLite builds without the math functions get Python ones (slower, same results)."""
    try:
        await conn.execute("SELECT pow(2, 2), floor(1.5), ceil(1.5)")
    except sqlite3.OperationalError:
        await conn.create_function("pow", 2, math.pow, deterministic=True)
        await conn.create_function("floor", 1, math.floor, deterministic=True)
        await conn.create_function("ceil", 1, math.ceil, deterministic=True)
