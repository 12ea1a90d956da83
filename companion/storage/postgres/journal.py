"""PostgreSQL statements of the change journal (``memory_changes``) and of typed settings (``settings``),
inside the caller's transaction: every memory write records its entries before it commits, so a change
and its entry are kept or lost together (``records`` decides which entry a write is).

A transaction that writes entries first takes its scopes' advisory locks (``lock_scopes``), in key order:
two writers of one scope then take their ``seq`` in the order they commit, so a scope's counter (its newest
``seq``) never moves past a change another process has not committed yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from companion.core.changes import Change, ChangeOp
from companion.core.models import Memory, Scope, Status
from companion.storage.postgres.row_codec import key, scope_of, second
from companion.storage.postgres.schema import Conn
from companion.storage.records import ENDS_THREAD, change_op

Entry = tuple[int | None, ChangeOp]  # (handle, or None for the whole scope; what happened)

# The newest entry by a backward step of the scope's index, never an aggregate: with statistics from before
# the rows came (a new table, autovacuum not yet run) the planner read every entry of a busy scope for
# max(seq), 1.3 ms and a heap fetch each for 8,000 entries, on every turn.
NEWEST = "SELECT seq FROM memory_changes WHERE user_id = $1 AND chat_id = $2 ORDER BY seq DESC LIMIT 1"
COUNTER = f"SELECT coalesce(({NEWEST}), 0)"


async def lock_scopes(conn: Conn, scopes: Iterable[Scope]) -> None:
    keys = sorted({s.key for s in scopes})
    if keys:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) "
                           "FROM (SELECT k FROM unnest($1::text[]) AS k ORDER BY k) AS ordered", keys)


async def record(conn: Conn, scope: Scope, entries: Sequence[Entry], now: datetime) -> None:
    if entries:
        await conn.execute(
            "INSERT INTO memory_changes (user_id, chat_id, handle, op, at) SELECT $1, $2, e.handle, e.op, $5 "
            "FROM unnest($3::bigint[], $4::text[]) WITH ORDINALITY AS e(handle, op, n) ORDER BY e.n",
            *key(scope), [h for h, _ in entries], [op.value for _, op in entries], second(now))
        ended = [h for h, op in entries if h is not None and op in ENDS_THREAD]
        if ended:  # a tombstone's follow-up thread goes with it (``followups``)
            await conn.execute("DELETE FROM followup_threads WHERE user_id = $1 AND chat_id = $2 "
                               "AND handle = ANY($3::bigint[])", *key(scope), ended)


async def update_entries(conn: Conn, scope: Scope, updates: Sequence[Memory]) -> list[Entry]:
    """The entries for ``updates`` of stored rows, read before they are written (status and tier before)."""
    if not updates:
        return []
    rows = await conn.fetch("SELECT id, status, tier FROM memories WHERE user_id = $1 AND chat_id = $2 "
                            "AND id = ANY($3::bigint[])", *key(scope), [m.id for m in updates])
    before = {int(r[0]): (Status(r[1]), str(r[2])) for r in rows}
    return [(m.id, change_op(*before[m.id], m)) for m in updates if m.id in before]


async def since(conn: Conn, scope: Scope, after: int, limit: int) -> list[Change]:
    rows = await conn.fetch("SELECT seq, handle, op, at FROM memory_changes WHERE user_id = $1 AND chat_id = $2 "
                            "AND seq > $3 ORDER BY seq LIMIT $4", *key(scope), after, max(limit, 0))
    return [Change(int(r[0]), scope, r[1], ChangeOp(r[2]), r[3]) for r in rows]


async def after(conn: Conn, seq: int, limit: int) -> list[Change]:
    rows = await conn.fetch("SELECT seq, user_id, chat_id, handle, op, at FROM memory_changes WHERE seq > $1 "
                            "ORDER BY seq LIMIT $2", seq, max(limit, 0))
    return [Change(int(r[0]), scope_of(r[1], r[2]), r[3], ChangeOp(r[4]), r[5]) for r in rows]


async def prune(conn: Conn, before: datetime) -> int:
    rows = await conn.fetch(
        "DELETE FROM memory_changes WHERE at < $1 AND seq NOT IN "
        "(SELECT max(seq) FROM memory_changes GROUP BY user_id, chat_id) RETURNING 1", second(before))
    return len(rows)


# ---- typed settings --------------------------------------------------------------------------------


async def move_settings(conn: Conn, names: Sequence[str], old_owner: str, new_owner: str) -> None:
    """The settings ``names`` of one owner pass to another; a value the new owner already has wins."""
    await conn.execute("INSERT INTO settings (name, owner, value) SELECT name, $2, value FROM settings "
                       "WHERE owner = $1 AND name = ANY($3::text[]) ON CONFLICT DO NOTHING",
                       old_owner, new_owner, list(names))
    await conn.execute("DELETE FROM settings WHERE owner = $1 AND name = ANY($2::text[])", old_owner, list(names))
