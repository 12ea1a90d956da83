"""PostgreSQL statements that write, inside the caller's transaction: new memories with fresh handles,
updates, the turns each came from, content-free tombstones, forgetting and everything it reaches, a scope's
move to a group's new chat id, and short-term items; each memory change with its journal entry
(``journal``). ``store.PostgresStore`` decides what is written when. Every statement is parameterised; the
scope is always part of the WHERE clause.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from companion.core.changes import ChangeOp
from companion.core.errors import StorageError
from companion.core.extraction import fingerprint
from companion.core.models import Memory, MemoryDraft, Scope, ShortKind
from companion.core.rules import new_memory
from companion.storage.postgres import journal
from companion.storage.postgres.row_codec import (
    INSERT_MEMORY,
    UPDATE_MEMORY,
    key,
    memory_to_row,
    memory_update_row,
    second,
)
from companion.storage.postgres.schema import Conn
from companion.storage.records import SCOPE_SETTINGS, forget_op
from companion.storage.rows import source_rows

SCOPED_TABLES = ("memories", "pending_turns", "short_term", "memory_vectors")


async def new_handles(conn: Conn, count: int) -> list[int]:
    """``count`` fresh database-wide handles, in increasing order (the identity never hands one out twice)."""
    rows = await conn.fetch("SELECT nextval(pg_get_serial_sequence('memories', 'id')) FROM generate_series(1, $1)",
                            count)
    ids = sorted(int(r[0]) for r in rows)
    if len(ids) != count:
        raise StorageError(f"asked for {count} memory handles, got {len(ids)}")
    return ids


async def insert_rows(conn: Conn, scope: Scope, memories: Sequence[Memory]) -> None:
    if memories:
        await conn.executemany(INSERT_MEMORY, [(*key(scope), *memory_to_row(m)) for m in memories])


async def bump_handles(conn: Conn) -> None:
    """After rows came in with their own handles: the identity goes on above the highest one."""
    await conn.execute(
        "SELECT setval(pg_get_serial_sequence('memories', 'id'), m) FROM (SELECT max(id) AS m FROM memories) AS x "
        "WHERE m IS NOT NULL AND m >= (SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
        "FROM memories_id_seq)")


async def write(conn: Conn, scope: Scope, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
                sources: Sequence[str], now: datetime) -> list[int]:
    """Insert ``inserts`` and update ``updates`` of the scope, each told by ``sources``, journalled; the new
    handles."""
    changed = await journal.update_entries(conn, scope, updates)
    ids = await new_handles(conn, len(inserts)) if inserts else []
    await insert_rows(conn, scope, [new_memory(d, mid, now) for d, mid in zip(inserts, ids, strict=True)])
    if updates:
        await conn.executemany(UPDATE_MEMORY, [memory_update_row(scope, m) for m in updates])
    await add_sources(conn, source_rows([*ids, *(m.id for m in updates)], sources))
    await journal.record(conn, scope, [*((i, ChangeOp.ADDED) for i in ids), *changed], now)
    return ids


async def add_sources(conn: Conn, rows: Sequence[tuple[int, str]]) -> None:
    """Provenance rows (memory handle, turn key); one already there stays."""
    if rows:
        await conn.executemany("INSERT INTO memory_sources (memory_id, turn_key) VALUES ($1, $2) "
                               "ON CONFLICT DO NOTHING", rows)


async def tombstone(conn: Conn, scope: Scope, ids: Sequence[int], now: datetime, reason: str) -> list[int]:
    """Forget: text, keywords and importance go; handle, time, reason and a one-way fingerprint stay. Each
    memory forgotten gets its journal entry; returns their handles."""
    if not ids:
        return []
    found = await conn.fetch("SELECT id, event FROM memories WHERE user_id = $1 AND chat_id = $2 "
                             "AND id = ANY($3::bigint[]) AND status != 'forgotten' FOR UPDATE",
                             *key(scope), list(ids))
    await conn.execute(
        "UPDATE memories AS m SET event = '', keywords = '{}', terms = '{}', happens = NULL, importance = 0, "
        "status = 'forgotten', status_reason = $4, fingerprint = f.print, updated_at = $5, superseded_by = NULL "
        "FROM unnest($3::bigint[], $6::text[]) AS f(id, print) WHERE m.user_id = $1 AND m.chat_id = $2 "
        "AND m.id = f.id", *key(scope), [r["id"] for r in found], reason, second(now),
        [fingerprint(r["event"]) for r in found])
    gone = sorted(int(r["id"]) for r in found)
    await journal.record(conn, scope, [(mid, forget_op(reason)) for mid in gone], now)
    return gone


async def forget_everywhere(conn: Conn, scope: Scope, ids: Sequence[int] | None, now: datetime,
                            reason: str, queued: Sequence[int], short: Sequence[int]) -> set[str]:
    """Tombstones, the profile, the vectors, and the queued turns and short-term items that told the
    memories (or with ``ids=None`` everything of the scope); the keys of the turns they came from."""
    scoped = key(scope)
    everything = ids is None
    wanted = [int(r[0]) for r in await conn.fetch(
        "SELECT id FROM memories WHERE user_id = $1 AND chat_id = $2 AND status != 'forgotten' "
        "AND ($3 OR id = ANY($4::bigint[])) ORDER BY id", *scoped, everything, sorted(set(ids or ())))]
    keys = {str(r[0]) for r in await conn.fetch(
        "SELECT DISTINCT turn_key FROM memory_sources WHERE memory_id = ANY($1::bigint[])", wanted)}
    if everything:
        await conn.execute("DELETE FROM pending_turns WHERE user_id = $1 AND chat_id = $2", *scoped)
        await conn.execute("DELETE FROM short_term WHERE user_id = $1 AND chat_id = $2", *scoped)
        await journal.record(conn, scope, [(None, ChangeOp.EVENTS)], now)
    else:
        await conn.execute("DELETE FROM pending_turns WHERE user_id = $1 AND chat_id = $2 "
                           "AND (id = ANY($3::bigint[]) OR turn_key = ANY($4::text[]))", *scoped, list(queued),
                           sorted(keys))
        told = await conn.fetch("DELETE FROM short_term WHERE user_id = $1 AND chat_id = $2 "
                                "AND (id = ANY($3::bigint[]) OR turn_keys && $4::text[]) RETURNING id", *scoped,
                                list(short), sorted(keys))
        if told or short:
            await journal.record(conn, scope, [(None, ChangeOp.EVENTS)], now)
    gone = await tombstone(conn, scope, wanted, now, reason)
    if gone or everything:
        # The profile may quote what was forgotten: it goes now and is rebuilt without it.
        await conn.execute("DELETE FROM profiles WHERE user_id = $1 AND chat_id = $2", *scoped)
    await conn.execute("DELETE FROM memory_vectors WHERE user_id = $1 AND chat_id = $2 AND handle = ANY($3::bigint[])",
                       *scoped, wanted)
    await conn.execute(COUNT_FORGET, *scoped)
    return keys


# A conversation another process holds reads its turns again when this moved (``TurnView.forgot``).
COUNT_FORGET = ("INSERT INTO turn_state (user_id, chat_id, forgets) SELECT $1, $2, 1 WHERE EXISTS (SELECT 1 FROM "
                "scopes WHERE user_id = $1 AND chat_id = $2) ON CONFLICT (user_id, chat_id) DO UPDATE SET "
                "forgets = turn_state.forgets + 1")


async def move_scope(conn: Conn, old: Scope, new: Scope, now: datetime) -> None:
    """Everything of ``old`` becomes ``new``'s, journalled for both; what ``new`` already has wins
    (companion mode: either on; a pending edit of the old scope is dropped)."""
    (user, old_chat), (_, new_chat) = key(old), key(new)
    await conn.execute(
        "INSERT INTO scopes (user_id, chat_id, active, created_at) SELECT user_id, $3, active, $4 FROM scopes "
        "WHERE user_id = $1 AND chat_id = $2 ON CONFLICT (user_id, chat_id) DO UPDATE SET "
        "active = scopes.active OR excluded.active", user, old_chat, new_chat, second(now))
    for table in SCOPED_TABLES:
        await conn.execute(f"UPDATE {table} SET chat_id = $3 WHERE user_id = $1 AND chat_id = $2",
                           user, old_chat, new_chat)
    await conn.execute("INSERT INTO profiles (user_id, chat_id, core, dynamic, built_at, dirty) "
                       "SELECT user_id, $3, core, dynamic, built_at, true FROM profiles "
                       "WHERE user_id = $1 AND chat_id = $2 ON CONFLICT DO NOTHING", user, old_chat, new_chat)
    await conn.execute("DELETE FROM profiles WHERE user_id = $1 AND chat_id = $2", user, old_chat)
    await conn.execute("DELETE FROM scopes WHERE user_id = $1 AND chat_id = $2", user, old_chat)
    await conn.execute("DELETE FROM turn_state WHERE user_id = $1 AND chat_id = $2", user, old_chat)
    await journal.move_settings(conn, SCOPE_SETTINGS, old.key, new.key)
    for moved in (old, new):
        await journal.record(conn, moved, [(None, ChangeOp.MOVED_CHAT)], now)


async def add_short(conn: Conn, scope: Scope, kind: ShortKind, user: str, reply: str | None,
                    at: datetime, recalled: bool, keep: int, turn_keys: Sequence[str]) -> None:
    """Append one item and drop the oldest beyond ``keep`` of its kind."""
    scoped = key(scope)
    await conn.execute("INSERT INTO short_term (user_id, chat_id, kind, user_text, reply_text, recalled, created_at, "
                       "turn_keys) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", *scoped, kind.value, user, reply,
                       recalled, second(at), list(turn_keys))
    await conn.execute("DELETE FROM short_term WHERE user_id = $1 AND chat_id = $2 AND kind = $3 AND id < "
                       "coalesce((SELECT min(id) FROM (SELECT id FROM short_term WHERE user_id = $1 AND chat_id = $2 "
                       "AND kind = $3 ORDER BY id DESC LIMIT $4) AS kept), 9223372036854775807)",
                       *scoped, kind.value, keep)


def with_handles(memories: Sequence[Memory], handles: Sequence[int]) -> list[Memory]:
    return [replace(m, id=h) for m, h in zip(memories, handles, strict=True)]

