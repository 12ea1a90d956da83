"""The PostgreSQL store: ``MemoryStore`` on an asyncpg pool (``pool.Pool``), for an installation that
outgrows one SQLite file (several workers, several bots on one database, a database server kept by
someone else).

Every public method is one short transaction or one statement, awaiting nothing but the database. Every
memory is a row of the one ``memories`` table keyed by its scope; its identity is its handle. Decay and
cleanup are set-based SQL over batches of scopes (``decay.py``); the statements that write are
``writes.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import TypeVar

from companion.core.cells import CellColumn
from companion.core.changes import Change, ChangeOp
from companion.core.models import Memory, MemoryDraft, Profile, Scope, ShortItem, ShortKind, Status, Turn
from companion.core.setting import Setting
from companion.core.timeutil import utcnow
from companion.core.turnview import TurnView
from companion.storage.base import ACTIVE_ONLY, CELL_BATCH, STREAM_BATCH
from companion.storage.postgres import csvcells as cells
from companion.storage.postgres import decay, journal, turn, writes
from companion.storage.postgres.extras import PgUsageLog, PgVectors
from companion.storage.postgres.followups import FollowUpTables
from companion.storage.postgres.kanban import KanbanTables
from companion.storage.postgres.pool import DRIVER_ERRORS, pg_error
from companion.storage.postgres.row_codec import (
    SELECT_MEMORY,
    SHORT_COLUMNS,
    TURN_COLUMNS,
    key,
    profile_to_row,
    row_to_memory,
    row_to_profile,
    row_to_short,
    row_to_turn,
    scope_of,
    second,
    turn_to_row,
)
from companion.storage.records import CHAT_SETTINGS_THAT_MOVE, drops_events
from companion.storage.rows import renumbered
from companion.storage.turns import TurnRecord

K = TypeVar("K")
V = TypeVar("V")

# Scopes per decay transaction: each batch commits on its own, so a turn never waits long for a row lock.
DECAY_BATCH = 500
_SCOPED = "user_id = $1 AND chat_id = $2"


class PostgresStore(KanbanTables, FollowUpTables):
    """Implements ``MemoryStore``."""

    # ---- scopes ----------------------------------------------------------------------------------

    async def scopes(self) -> list[Scope]:
        rows = await self._fetch("SELECT user_id, chat_id FROM scopes")
        return sorted((scope_of(*r) for r in rows), key=lambda s: s.key)

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            await conn.execute(f"UPDATE scopes SET active = $3 WHERE {_SCOPED}", *key(scope), active)

    async def active_scopes(self) -> set[Scope]:
        return {scope_of(*r) for r in await self._fetch("SELECT user_id, chat_id FROM scopes WHERE active")}

    # ---- memories --------------------------------------------------------------------------------

    async def fetch_memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        if not statuses:
            return []
        rows = await self._fetch(f"SELECT {SELECT_MEMORY} FROM memories WHERE {_SCOPED} AND status = ANY($3::text[]) "
                                 "ORDER BY id", *key(scope), sorted(s.value for s in statuses))
        return [row_to_memory(r) for r in rows]

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        if not ids:
            return []
        rows = await self._fetch(f"SELECT {SELECT_MEMORY} FROM memories WHERE {_SCOPED} AND id = ANY($3::bigint[]) "
                                 "ORDER BY id", *key(scope), [int(i) for i in ids])
        return [row_to_memory(r) for r in rows]

    async def stream_memories(
        self, scopes: Sequence[Scope] | None = None, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[tuple[Scope, list[Memory]]]:
        for scope in await self.scopes() if scopes is None else scopes:
            after = 0
            while rows := await self._fetch(f"SELECT {SELECT_MEMORY} FROM memories WHERE {_SCOPED} AND id > $3 "
                                            "ORDER BY id LIMIT $4", *key(scope), after, batch):
                memories = [row_to_memory(r) for r in rows]
                yield scope, memories
                after = memories[-1].id

    def stream_csv(
        self, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None, tail: Sequence[str] = (), *,
        batch: int = CELL_BATCH,
    ) -> AsyncIterator[tuple[Scope, str, int]]:
        return cells.stream_csv(self._fetch, columns, tz, offset, tail, batch)

    async def owner_of(self, handle: int) -> Scope | None:
        rows = await self._fetch("SELECT user_id, chat_id FROM memories WHERE id = $1", int(handle))
        return scope_of(*rows[0]) if rows else None

    async def apply_changes(
        self, scope: Scope, now: datetime, inserts: Sequence[MemoryDraft] = (), updates: Sequence[Memory] = (),
        forget: Iterable[int] = (), reason: str = "user", sources: Sequence[str] = (),
    ) -> list[int]:
        forget_ids = sorted(set(forget))
        if not inserts and not updates and not forget_ids:
            return []
        async with self._changing([scope]) as conn:
            if not inserts and not updates and not await self._known(conn, scope):
                return []  # nothing to forget in a scope never written: create nothing
            await self._ensure_scope(conn, scope, now)
            ids = await writes.write(conn, scope, inserts, updates, sources, now)
            gone = await writes.tombstone(conn, scope, forget_ids, now, reason)
            if ids or updates or gone:
                await conn.execute(f"UPDATE profiles SET dirty = true WHERE {_SCOPED}", *key(scope))
        return ids

    async def mark_mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        if ids:
            await self._fetch(turn.MENTION, *key(scope), second(now), list(ids))

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        if ids:
            await self._fetch(turn.TOUCH, *key(scope), second(now), list(ids))

    async def forget_everywhere(
        self, scope: Scope, ids: Sequence[int] | None, now: datetime, reason: str = "user", *,
        queued: Sequence[int] = (), short: Sequence[int] = (),
    ) -> set[str]:
        async with self._changing([scope]) as conn:
            return await writes.forget_everywhere(conn, scope, ids, now, reason, queued, short)

    async def forgotten_turns(self, scope: Scope, keys: Collection[str]) -> set[str]:
        wanted = sorted(k for k in keys if k)
        if not wanted:
            return set()
        rows = await self._fetch(
            "SELECT DISTINCT s.turn_key FROM memory_sources AS s JOIN memories AS m ON m.id = s.memory_id "
            "WHERE m.user_id = $1 AND m.chat_id = $2 AND s.turn_key = ANY($3::text[]) AND m.status = 'forgotten' "
            "AND m.status_reason = 'user'", *key(scope), wanted)
        return {str(r[0]) for r in rows}

    async def drop_turns(self, scope: Scope, ids: Sequence[int]) -> None:
        if ids:
            await self._fetch(f"DELETE FROM pending_turns WHERE {_SCOPED} AND id = ANY($3::bigint[])",
                              *key(scope), list(ids))

    async def import_rows(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, *, keep_ids: bool = True,
        sources: Mapping[int, Collection[str]] | None = None,
    ) -> list[int]:
        async with self._changing([scope]) as conn:
            await self._ensure_scope(conn, scope, now)
            if not keep_ids:
                handles = await writes.new_handles(conn, len(memories))
                sources = renumbered(sources, memories, handles)
                memories = writes.with_handles(memories, handles)
            await writes.insert_rows(conn, scope, memories)
            await writes.add_sources(conn, [(h, k) for h, keys in (sources or {}).items() for k in sorted(set(keys))
                                            if k])
            if keep_ids and memories:
                await writes.bump_handles(conn)
            await journal.record(conn, scope, [(m.id, ChangeOp.IMPORTED) for m in memories], now)
        return [m.id for m in memories]

    async def sources_of(self, scope: Scope, ids: Sequence[int]) -> dict[int, set[str]]:
        rows = await self._fetch(
            "SELECT s.memory_id, s.turn_key FROM memory_sources AS s JOIN memories AS m ON m.id = s.memory_id "
            "WHERE m.user_id = $1 AND m.chat_id = $2 AND s.memory_id = ANY($3::bigint[])",
            *key(scope), [int(i) for i in ids])
        found: dict[int, set[str]] = {}
        for mid, turn_key in rows:
            found.setdefault(int(mid), set()).add(str(turn_key))
        return found

    async def count_memories(self) -> int:
        return int(await self._value("SELECT count(*) FROM memories WHERE status = 'active'") or 0)

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        """Batches of scopes, each one short transaction of two statements; a run cut short and run again
        redoes nothing and misses nothing (every row decays by whole days since its own anchor)."""
        decayed = removed = 0
        for start in range(0, len(scopes), DECAY_BATCH):
            batch = scopes[start:start + DECAY_BATCH]
            users, chats = [s.user_id for s in batch], [s.chat_id or 0 for s in batch]
            async with self._changing(batch) as conn:
                decayed += int(await conn.fetchval(decay.DECAY, users, chats, second(now)))
                removed += int(await conn.fetchval(decay.CLEAN, users, chats, second(now)))
            await asyncio.sleep(0)
        return decayed, removed

    # ---- the change journal and typed settings ----------------------------------------------------

    async def change_counter(self, scope: Scope) -> int:
        return int(await self._value(journal.COUNTER, *key(scope)) or 0)

    async def changes_since(self, scope: Scope, after: int, limit: int) -> list[Change]:
        async with self._tx() as conn:
            return await journal.since(conn, scope, after, limit)

    async def changes_after(self, after: int, limit: int) -> list[Change]:
        async with self._tx() as conn:
            return await journal.after(conn, after, limit)

    async def prune_changes(self, before: datetime) -> int:
        async with self._tx() as conn:
            return await journal.prune(conn, before)

    async def get_setting(self, setting: Setting[K, V], key: K) -> V | None:
        value = await self._value("SELECT value FROM settings WHERE name = $1 AND owner = $2", setting.name.value,
                                  setting.owner(key))
        return None if value is None else setting.decode(str(value))

    async def set_setting(self, setting: Setting[K, V], key: K, value: V) -> None:
        await self._fetch("INSERT INTO settings (name, owner, value) VALUES ($1, $2, $3) ON CONFLICT (name, owner) "
                          "DO UPDATE SET value = excluded.value", setting.name.value, setting.owner(key),
                          setting.encode(value))

    async def all_settings(self) -> list[tuple[str, str, str]]:
        rows = await self._fetch("SELECT name, owner, value FROM settings ORDER BY name, owner")
        return [(str(n), str(o), str(v)) for n, o, v in rows]

    # ---- one turn's read and write (``storage.turns``) ---------------------------------------------

    async def turn_context(self, scope: Scope, *, events: int, turns: int = 0, memories: bool = False) -> TurnView:
        try:
            async with self._pool.acquire() as conn:
                return await turn.read_turn(conn, scope, events, turns, memories)
        except DRIVER_ERRORS as exc:
            raise pg_error(exc) from exc

    async def record_turn(self, scope: Scope, record: TurnRecord) -> None:
        async with self._tx() as conn:
            if record.queued:
                await self._ensure_scope(conn, scope, record.at)
            await turn.write_turn(conn, scope, record)

    async def set_editing(self, scope: Scope, handle: int | None) -> None:
        await self._fetch("INSERT INTO turn_state (user_id, chat_id, editing) VALUES ($1, $2, $3) "
                          "ON CONFLICT (user_id, chat_id) DO UPDATE SET editing = excluded.editing",
                          *key(scope), handle)

    async def set_hinted(self, scope: Scope, at: datetime) -> None:
        await self._fetch(turn.HINTED, *key(scope), second(at))

    # ---- the extraction queue --------------------------------------------------------------------

    async def add_turn(self, scope: Scope, turn_: Turn) -> int:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, turn_.at)
            return int(await conn.fetchval(turn.QUEUE_TURN, *key(scope), *turn_to_row(turn_)))

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        rows = await self._fetch(f"SELECT {TURN_COLUMNS} FROM pending_turns WHERE {_SCOPED} ORDER BY id LIMIT $3",
                                 *key(scope), limit)
        return [row_to_turn(r) for r in rows]

    async def scopes_with_pending(self) -> list[Scope]:
        rows = await self._fetch("SELECT DISTINCT user_id, chat_id FROM pending_turns")
        return sorted((scope_of(*r) for r in rows), key=lambda s: s.key)

    async def count_pending(self, scope: Scope) -> int:
        return int(await self._value(f"SELECT count(*) FROM pending_turns WHERE {_SCOPED}", *key(scope)) or 0)

    async def consume_turns(
        self, scope: Scope, up_to_id: int, now: datetime, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
        sources: Sequence[str] = (),
    ) -> list[int]:
        async with self._changing([scope]) as conn:
            await self._ensure_scope(conn, scope, now)
            ids = await writes.write(conn, scope, inserts, updates, sources, now)
            await conn.execute(f"DELETE FROM pending_turns WHERE {_SCOPED} AND id <= $3", *key(scope), up_to_id)
            if ids or updates:
                await conn.execute(f"UPDATE profiles SET dirty = true WHERE {_SCOPED}", *key(scope))
        return ids

    async def clear_turns(self, scope: Scope) -> None:
        await self._fetch(f"DELETE FROM pending_turns WHERE {_SCOPED}", *key(scope))

    # ---- short-term memory -----------------------------------------------------------------------

    async def add_short(
        self, scope: Scope, kind: ShortKind, user: str, reply: str | None, at: datetime, *, keep: int,
        recalled: bool = False, keys: Sequence[str] = (),
    ) -> None:
        # Only events are journalled (their cache follows the counter); turns are read afresh every time.
        async with self._changing([scope] if kind is ShortKind.EVENT else []) as conn:
            await writes.add_short(conn, scope, kind, user, reply, at, recalled, keep, keys)
            if kind is ShortKind.EVENT:
                await journal.record(conn, scope, [(None, ChangeOp.EVENTS)], at)

    async def short_items(self, scope: Scope, kind: ShortKind, limit: int) -> list[ShortItem]:
        rows = await self._fetch(f"SELECT {SHORT_COLUMNS} FROM short_term WHERE {_SCOPED} AND kind = $3 "
                                 "ORDER BY id DESC LIMIT $4", *key(scope), kind.value, max(limit, 0))
        return [row_to_short(r) for r in reversed(rows)]

    async def drop_short(self, scope: Scope, ids: Sequence[int] | None = None, kind: ShortKind | None = None) -> None:
        events = drops_events(ids, kind)
        async with self._changing([scope] if events else []) as conn:
            if ids is not None:
                await conn.execute(f"DELETE FROM short_term WHERE {_SCOPED} AND id = ANY($3::bigint[])",
                                   *key(scope), list(ids))
            elif kind is not None:
                await conn.execute(f"DELETE FROM short_term WHERE {_SCOPED} AND kind = $3", *key(scope), kind.value)
            else:
                await conn.execute(f"DELETE FROM short_term WHERE {_SCOPED}", *key(scope))
            if events:
                await journal.record(conn, scope, [(None, ChangeOp.EVENTS)], utcnow())

    # ---- profiles --------------------------------------------------------------------------------

    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None:
        rows = await self._fetch(f"SELECT core, dynamic, built_at, dirty FROM profiles WHERE {_SCOPED}", *key(scope))
        return row_to_profile(rows[0]) if rows else None

    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, built_at)
            await conn.execute(
                "INSERT INTO profiles (user_id, chat_id, core, dynamic, built_at, dirty) VALUES ($1, $2, $3, $4, $5, "
                "false) ON CONFLICT (user_id, chat_id) DO UPDATE SET core = excluded.core, dynamic = excluded.dynamic, "
                "built_at = excluded.built_at, dirty = false", *key(scope), *profile_to_row(profile), second(built_at))

    async def delete_profile(self, scope: Scope) -> None:
        await self._fetch(f"DELETE FROM profiles WHERE {_SCOPED}", *key(scope))

    # ---- a group chat that changed its id --------------------------------------------------------

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """One transaction per member's scope, then one for the chat's own state and the marker."""
        await self.begin_move(old_chat_id, new_chat_id, now)
        rows = await self._fetch("SELECT user_id, chat_id FROM scopes WHERE chat_id = $1", old_chat_id)
        olds = sorted((scope_of(*r) for r in rows), key=lambda s: s.key)
        for old in olds:
            new = Scope(old.user_id, new_chat_id)
            async with self._changing([old, new]) as conn:
                await writes.move_scope(conn, old, new, now)
        async with self._tx() as conn:
            await journal.move_settings(conn, CHAT_SETTINGS_THAT_MOVE, str(old_chat_id), str(new_chat_id))
            await conn.execute("DELETE FROM chat_moves WHERE old_chat_id = $1", old_chat_id)
        return olds

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        # A marker already there (the handler wrote it, or a restart resumes) keeps its first start time.
        await self._fetch("INSERT INTO chat_moves (old_chat_id, new_chat_id, started_at) VALUES ($1, $2, $3) "
                          "ON CONFLICT DO NOTHING", old_chat_id, new_chat_id, second(now))

    async def unfinished_moves(self) -> list[tuple[int, int]]:
        rows = await self._fetch("SELECT old_chat_id, new_chat_id FROM chat_moves ORDER BY started_at, old_chat_id")
        return [(int(a), int(b)) for a, b in rows]

    # ---- capabilities ----------------------------------------------------------------------------

    async def open_vectors(self) -> PgVectors:
        return PgVectors(self)

    def usage_log(self) -> PgUsageLog:
        return PgUsageLog(self)

    def maintenance(self) -> None:
        return None  # no database file: the server's own tools back it up


async def open_postgres(url: str) -> PostgresStore:
    return await PostgresStore.open(url)
