"""The follow-up threads' table: one row per told event the companion may follow up (``records.Thread``).

The table owner ``followups`` has its migration set here (``FOLLOWUPS``, registered with ``migrations``);
``sqlite`` imports this module so every store has the table. Rows hold dates and flags, never words: the
engine derives them from the memories (``companion.engine.followup_threads``), and a forgotten memory's row goes in
the forget's own transaction (``journal.record``). One partial index serves the round that looks for
threads due over every scope: one indexed query however many users there are.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime

import aiosqlite

from companion.core.models import Scope
from companion.core.timeutil import from_db, to_db
from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.records import FollowUpScope, Thread
from companion.storage.sqlite.connection import Connection
from companion.storage.sqlite.migrations import register

FOLLOWUPS = MigrationSet("followups", (
    Migration("0001_threads", """
    CREATE TABLE followup_threads (
        scope_key TEXT NOT NULL,
        handle INTEGER NOT NULL,
        due_on TEXT NOT NULL,
        until_on TEXT NOT NULL,
        pushed_at TEXT,
        answered INTEGER NOT NULL DEFAULT 0,
        stopped INTEGER NOT NULL DEFAULT 0,
        closed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (scope_key, handle)
    ) WITHOUT ROWID;
    CREATE TABLE followup_scopes (
        scope_key TEXT PRIMARY KEY,
        off INTEGER NOT NULL DEFAULT 0,
        sent_at TEXT,
        sent_before TEXT
    );
    CREATE INDEX followup_threads_due ON followup_threads (due_on)
        WHERE pushed_at IS NULL AND stopped = 0 AND closed = 0;
    CREATE INDEX followup_threads_until ON followup_threads (until_on) WHERE closed = 0
    """),
))
register(FOLLOWUPS)

COLUMNS = "scope_key, handle, due_on, until_on, pushed_at, answered, stopped, closed"

# New dates are a new event (an edit moved it): it may be followed up again; a "never bring it up" stays.
UPSERT = (
    "INSERT INTO followup_threads (scope_key, handle, due_on, until_on) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (scope_key, handle) DO UPDATE SET closed = 0, "
    "pushed_at = CASE WHEN due_on = excluded.due_on THEN pushed_at END, "
    "answered = CASE WHEN due_on = excluded.due_on THEN answered ELSE 0 END, "
    "due_on = excluded.due_on, until_on = excluded.until_on"
)
CLOSE = "UPDATE followup_threads SET closed = 1 WHERE scope_key = ? AND handle = ?"
# What ``FollowUpState.due_threads`` promises, in one statement: the partial index finds the threads due
# today; each is kept only for a private scope ('u...') in companion mode whose user may be written to.
DUE = (
    f"SELECT {', '.join('t.' + c for c in COLUMNS.split(', '))} FROM followup_threads t "
    "JOIN scopes sc ON sc.key = t.scope_key AND sc.active = 1 "
    "LEFT JOIN followup_scopes f ON f.scope_key = t.scope_key "
    "LEFT JOIN turn_state ts ON ts.scope_key = t.scope_key "
    "WHERE t.pushed_at IS NULL AND t.stopped = 0 AND t.closed = 0 AND t.due_on <= ? AND t.until_on >= ? "
    "AND t.scope_key LIKE 'u%' AND coalesce(f.off, 0) = 0 AND (f.sent_at IS NULL OR f.sent_at < ?) "
    "AND (ts.said_at IS NULL OR ts.said_at < ?) AND (f.sent_before IS NULL OR ts.said_at > f.sent_before) "
    "ORDER BY t.due_on, t.scope_key, t.handle LIMIT ?"
)


def thread(row: aiosqlite.Row | tuple[object, ...]) -> Thread:
    key, handle, due, until, pushed, answered, stopped, closed = row
    return Thread(Scope.from_key(str(key)), int(str(handle)), date.fromisoformat(str(due)),
                  date.fromisoformat(str(until)), None if pushed is None else from_db(str(pushed)),
                  bool(answered), bool(stopped), bool(closed))


class FollowUpTables(Connection):
    """The ``FollowUpState`` methods of ``SQLiteStore``: each one short transaction or one read."""

    async def put_threads(self, scope: Scope, dates: Mapping[int, tuple[date, date] | None]) -> None:
        if not dates:
            return
        async with self._tx() as conn:
            await conn.executemany(CLOSE, [(scope.key, int(h)) for h, d in dates.items() if d is None])
            await conn.executemany(UPSERT, [(scope.key, int(h), d[0].isoformat(), d[1].isoformat())
                                            for h, d in dates.items() if d is not None])

    async def threads_of(self, scope: Scope) -> list[Thread]:
        rows = await self._select(f"SELECT {COLUMNS} FROM followup_threads WHERE scope_key = ? ORDER BY handle",
                                  (scope.key,))
        return [thread(r) for r in rows]

    async def due_threads(self, today: date, day_start: datetime, limit: int) -> list[Thread]:
        start = to_db(day_start)
        rows = await self._select(DUE, (today.isoformat(), today.isoformat(), start, start, max(int(limit), 0)))
        return [thread(r) for r in rows]

    async def stale_threads(self, before: date, limit: int) -> list[Thread]:
        rows = await self._select(
            f"SELECT {COLUMNS} FROM followup_threads WHERE closed = 0 AND until_on < ? "
            "ORDER BY until_on, scope_key, handle LIMIT ?", (before.isoformat(), max(int(limit), 0)))
        return [thread(r) for r in rows]

    async def mark_thread(self, scope: Scope, handle: int, *, pushed_at: datetime | None = None,
                          answered: bool | None = None, stopped: bool | None = None) -> bool:
        async with self._tx() as conn:
            cursor = await conn.execute(
                "UPDATE followup_threads SET pushed_at = coalesce(?, pushed_at), "
                "answered = coalesce(?, answered), stopped = coalesce(?, stopped) "
                "WHERE scope_key = ? AND handle = ?",
                (None if pushed_at is None else to_db(pushed_at), None if answered is None else int(answered),
                 None if stopped is None else int(stopped), scope.key, int(handle)))
            found = cursor.rowcount > 0
            if found and pushed_at is not None:
                await conn.execute(
                    "INSERT INTO followup_scopes (scope_key, sent_at) VALUES (?, ?) ON CONFLICT (scope_key) "
                    "DO UPDATE SET sent_before = sent_at, sent_at = excluded.sent_at", (scope.key, to_db(pushed_at)))
            return found

    async def followup_scope(self, scope: Scope) -> FollowUpScope:
        rows = await self._select(
            "SELECT f.off, f.sent_before, f.sent_at, ts.said_at FROM (SELECT ? AS k) AS wanted "
            "LEFT JOIN followup_scopes f ON f.scope_key = wanted.k LEFT JOIN turn_state ts ON ts.scope_key = wanted.k",
            (scope.key,))
        off, before, sent, said = rows[0]
        return FollowUpScope(bool(off), tuple(from_db(str(t)) for t in (before, sent) if t is not None),
                             None if said is None else from_db(str(said)))

    async def set_followups_off(self, scope: Scope, off: bool) -> None:
        async with self._tx() as conn:
            await conn.execute("INSERT INTO followup_scopes (scope_key, off) VALUES (?, ?) "
                               "ON CONFLICT (scope_key) DO UPDATE SET off = excluded.off", (scope.key, int(off)))

    async def thread_counts(self) -> dict[str, int]:
        rows = await self._select(
            "SELECT count(pushed_at), coalesce(sum(answered), 0), coalesce(sum(stopped), 0) FROM followup_threads")
        pushed, answered, stopped = rows[0] if rows else (0, 0, 0)
        return {"sent": int(pushed), "answered": int(answered), "stopped": int(stopped)}
