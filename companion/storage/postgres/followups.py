"""The follow-up threads' table on PostgreSQL (its migration set ``followups`` is in ``schema``, as
``storage/sqlite/followups.py`` has SQLite's): dates and flags per told event, never words; a forgotten memory's row
goes in the forget's own transaction (``journal.record``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from companion.core.models import Scope
from companion.storage.postgres.pool import Pool
from companion.storage.postgres.row_codec import key, scope_of, second
from companion.storage.records import FollowUpScope, Thread

COLUMNS = "user_id, chat_id, handle, due_on, until_on, pushed_at, answered, stopped, closed"

UPSERT = (
    "INSERT INTO followup_threads (user_id, chat_id, handle, due_on, until_on) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (user_id, chat_id, handle) DO UPDATE SET closed = false, "
    "pushed_at = CASE WHEN followup_threads.due_on = excluded.due_on THEN followup_threads.pushed_at END, "
    "answered = followup_threads.due_on = excluded.due_on AND followup_threads.answered, "
    "due_on = excluded.due_on, until_on = excluded.until_on"
)


# What ``FollowUpState.due_threads`` promises, in one statement (SQLite's ``followups.DUE``).
DUE = (
    f"SELECT {', '.join('t.' + c for c in COLUMNS.split(', '))} FROM followup_threads t "
    "JOIN scopes sc ON sc.user_id = t.user_id AND sc.chat_id = t.chat_id AND sc.active "
    "LEFT JOIN followup_scopes f ON f.user_id = t.user_id AND f.chat_id = t.chat_id "
    "LEFT JOIN turn_state ts ON ts.user_id = t.user_id AND ts.chat_id = t.chat_id "
    "WHERE t.pushed_at IS NULL AND NOT t.stopped AND NOT t.closed AND t.due_on <= $1 AND t.until_on >= $1 "
    "AND t.chat_id = 0 AND NOT coalesce(f.off, false) AND (f.sent_at IS NULL OR f.sent_at < $2) "
    "AND (ts.said_at IS NULL OR ts.said_at < $2) AND (f.sent_before IS NULL OR ts.said_at > f.sent_before) "
    "ORDER BY t.due_on, t.user_id, t.chat_id, t.handle LIMIT $3"
)


def thread(row: Any) -> Thread:
    user_id, chat_id, handle, due, until, pushed, answered, stopped, closed = row
    return Thread(scope_of(user_id, chat_id), int(handle), due, until, pushed, bool(answered), bool(stopped),
                  bool(closed))


class FollowUpTables(Pool):
    """The ``FollowUpState`` methods of ``PostgresStore``: each one short transaction or one read."""

    async def put_threads(self, scope: Scope, dates: Mapping[int, tuple[date, date] | None]) -> None:
        if not dates:
            return
        async with self._tx() as conn:
            closed = [(*key(scope), int(h)) for h, d in dates.items() if d is None]
            if closed:
                await conn.executemany("UPDATE followup_threads SET closed = true "
                                       "WHERE user_id = $1 AND chat_id = $2 AND handle = $3", closed)
            kept = [(*key(scope), int(h), d[0], d[1]) for h, d in dates.items() if d is not None]
            if kept:
                await conn.executemany(UPSERT, kept)

    async def threads_of(self, scope: Scope) -> list[Thread]:
        rows = await self._fetch(f"SELECT {COLUMNS} FROM followup_threads WHERE user_id = $1 AND chat_id = $2 "
                                 "ORDER BY handle", *key(scope))
        return [thread(r) for r in rows]

    async def due_threads(self, today: date, day_start: datetime, limit: int) -> list[Thread]:
        rows = await self._fetch(DUE, today, second(day_start), max(int(limit), 0))
        return [thread(r) for r in rows]

    async def stale_threads(self, before: date, limit: int) -> list[Thread]:
        rows = await self._fetch(
            f"SELECT {COLUMNS} FROM followup_threads WHERE NOT closed AND until_on < $1 "
            "ORDER BY until_on, user_id, chat_id, handle LIMIT $2", before, max(int(limit), 0))
        return [thread(r) for r in rows]

    async def mark_thread(self, scope: Scope, handle: int, *, pushed_at: datetime | None = None,
                          answered: bool | None = None, stopped: bool | None = None) -> bool:
        async with self._tx() as conn:
            done = await conn.fetch(
                "UPDATE followup_threads SET pushed_at = coalesce($4, pushed_at), "
                "answered = coalesce($5, answered), stopped = coalesce($6, stopped) "
                "WHERE user_id = $1 AND chat_id = $2 AND handle = $3 RETURNING 1",
                *key(scope), int(handle), None if pushed_at is None else second(pushed_at), answered, stopped)
            if done and pushed_at is not None:
                await conn.execute(
                    "INSERT INTO followup_scopes (user_id, chat_id, sent_at) VALUES ($1, $2, $3) "
                    "ON CONFLICT (user_id, chat_id) DO UPDATE SET sent_before = followup_scopes.sent_at, "
                    "sent_at = excluded.sent_at", *key(scope), second(pushed_at))
            return bool(done)

    async def followup_scope(self, scope: Scope) -> FollowUpScope:
        rows = await self._fetch(
            "SELECT f.off, f.sent_before, f.sent_at, ts.said_at FROM (SELECT $1::bigint AS u, $2::bigint AS c) w "
            "LEFT JOIN followup_scopes f ON f.user_id = w.u AND f.chat_id = w.c "
            "LEFT JOIN turn_state ts ON ts.user_id = w.u AND ts.chat_id = w.c", *key(scope))
        off, before, sent, said = rows[0]
        return FollowUpScope(bool(off), tuple(t for t in (before, sent) if t is not None), said)

    async def set_followups_off(self, scope: Scope, off: bool) -> None:
        async with self._tx() as conn:
            await conn.execute("INSERT INTO followup_scopes (user_id, chat_id, off) VALUES ($1, $2, $3) "
                               "ON CONFLICT (user_id, chat_id) DO UPDATE SET off = excluded.off", *key(scope), off)

    async def thread_counts(self) -> dict[str, int]:
        rows = await self._fetch("SELECT count(pushed_at), count(*) FILTER (WHERE answered), "
                                 "count(*) FILTER (WHERE stopped) FROM followup_threads")
        pushed, answered, stopped = rows[0]
        return {"sent": int(pushed), "answered": int(answered), "stopped": int(stopped)}
