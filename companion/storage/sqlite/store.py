"""The SQLite store: one long-lived aiosqlite connection, WAL, explicit short transactions behind a lock.

Memories live in one table per scope (``mem_u<user>``, ``mem_c<n|p><chat>_u<user>``, or ``mem_t<n>`` when
the scope took a spare table, see ``spares``), named only from validated integers (see ``Scope``); their
ids come from the database-wide ``memory_handles`` table, so a handle names one memory and its owner.
Shared tables hold the scope registry, profiles, the turns waiting for extraction and small state. Schema
changes are named migrations (``migrations.py``); a memory table is upgraded when its scope is touched or
by ``upgrade_stale`` in the background, never all at start-up.
Decay and cleanup are set-based SQL per table (``decay.py``), the same rules as ``core.rules``;
writing memory rows is ``writes.py``, forgetting and what it reaches ``tombstones.py``, a group's move to
a new chat id ``chatmove.py``, a reply's one read and one write and the pending edit ``turn.py``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import time
from collections import deque
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import aiosqlite

from companion.core.cells import CellColumn
from companion.core.changes import Change, ChangeOp
from companion.core.models import Memory, MemoryDraft, Profile, Scope, ShortItem, ShortKind, Status, Turn
from companion.core.setting import Setting
from companion.core.timeutil import to_db, utcnow
from companion.storage.base import ACTIVE_ONLY, CELL_BATCH, STREAM_BATCH
from companion.storage.cellsql import csv_of
from companion.storage.records import CHAT_SETTINGS_THAT_MOVE, SCOPE_SETTINGS, drops_events
from companion.storage.rows import (
    HANDLES_PER_STATEMENT,
    INSERT_MEMORY,
    PROFILE_COLUMNS,
    SELECT_MEMORY,
    TURN_COLUMNS,
    marks,
    memory_to_row,
    profile_to_row,
    renumbered,
    row_to_memory,
    row_to_profile,
    row_to_turn,
)
from companion.storage.sqlite import (  # noqa: F401 - usage_log and vector_schema register their migration sets
    chatmove,
    decay,
    journal,
    migrations,
    short_items,
    tombstones,
    usage_log,
    vector_schema,
    writes,
)
from companion.storage.sqlite.connection import storage_error
from companion.storage.sqlite.followups import FollowUpTables
from companion.storage.sqlite.kanban import KanbanTables
from companion.storage.sqlite.snapshot import STANDALONE
from companion.storage.sqlite.turn import QUEUE_TURN, TurnCalls, mention_sql, queue_params, touch_sql
from companion.storage.sqlite.usage_log import SQLiteUsageLog

if TYPE_CHECKING:  # a run-time import would be circular: vectors -> store
    from companion.storage.sqlite.vectors import VectorStore

K = TypeVar("K")
V = TypeVar("V")

# Decay and cleanup commit at least this often, so a turn never waits longer than this for the lock.
DECAY_SLICE_S = 0.01
MAX_DECAY_SLICE = 200


class SQLiteStore(TurnCalls, KanbanTables, FollowUpTables):
    """Implements ``MemoryStore``. Every public method is one short transaction; none awaits anything but
    SQLite."""

    async def scopes(self) -> list[Scope]:
        rows = await self._select("SELECT key FROM scopes ORDER BY key")
        return [Scope.from_key(str(row[0])) for row in rows]

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            await conn.execute("UPDATE scopes SET active = ? WHERE key = ?", (int(active), scope.key))

    async def active_scopes(self) -> set[Scope]:
        rows = await self._select("SELECT key FROM scopes WHERE active = 1")
        return {Scope.from_key(str(row[0])) for row in rows}

    # ---- memories --------------------------------------------------------------------------------

    async def fetch_memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        if not statuses or not await self._readable(scope):
            return []
        values = sorted(s.value for s in statuses)
        table = self.memory_table(scope)
        rows = await self._select(
            f'SELECT {SELECT_MEMORY} FROM "{table}" WHERE status IN ({marks(values)}) ORDER BY id', values
        )
        return [row_to_memory(row) for row in rows]

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        if not ids or not await self._readable(scope):
            return []
        table = self.memory_table(scope)
        rows = await self._select(f'SELECT {SELECT_MEMORY} FROM "{table}" WHERE id IN ({marks(ids)}) ORDER BY id',
                                  tuple(ids))
        return [row_to_memory(row) for row in rows]

    async def owner_of(self, handle: int) -> Scope | None:
        rows = await self._select("SELECT scope_key FROM memory_handles WHERE id = ?", (int(handle),))
        return Scope.from_key(str(rows[0][0])) if rows else None

    async def apply_changes(
        self, scope: Scope, now: datetime, inserts: Sequence[MemoryDraft] = (), updates: Sequence[Memory] = (),
        forget: Iterable[int] = (), reason: str = "user", sources: Sequence[str] = (),
    ) -> list[int]:
        forget_ids = sorted(set(forget))
        if not inserts and not updates and (not forget_ids or self._version(scope) is None):
            return []  # nothing to write, or nothing to forget in a scope never written: create nothing
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            ids = await self._write(conn, scope, inserts, updates, sources, now)
            gone = await tombstones.tombstone(conn, self.memory_table(scope), scope.key, forget_ids, now, reason)
            if ids or updates or gone:
                await conn.execute("UPDATE profiles SET dirty = 1 WHERE scope_key = ?", (scope.key,))
        return ids

    async def _write(
        self, conn: aiosqlite.Connection, scope: Scope, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
        sources: Sequence[str], now: datetime,
    ) -> list[int]:
        """Inserts and updates with their journal entries (an update's read before it is written)."""
        table = self.memory_table(scope)
        changed = await journal.update_entries(conn, table, updates)
        ids = await writes.write(conn, table, scope.key, inserts, updates, sources, now)
        await journal.record(conn, scope.key, [*((i, ChangeOp.ADDED) for i in ids), *changed], now)
        return ids

    async def mark_mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        if not ids or self._version(scope) is None:
            return
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            await conn.executemany(mention_sql(self.memory_table(scope)), [(to_db(now), mid) for mid in ids])

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        if not ids or self._version(scope) is None:
            return
        if self._version(scope) != migrations.CURRENT_TABLE_VERSION:
            await self.ensure_scope(scope, now)
        # One statement, committed on its own: shown memories are marked on every reply that recalls one.
        await self._select(touch_sql(self.memory_table(scope), len(ids)), (to_db(now), *ids), first=True)

    async def forget_everywhere(
        self, scope: Scope, ids: Sequence[int] | None, now: datetime, reason: str = "user", *,
        queued: Sequence[int] = (), short: Sequence[int] = (),
    ) -> set[str]:
        """One transaction: tombstones, the profile, the vectors, the queued turns and short-term items
        that told them (the turns they came from, plus ``queued`` and ``short`` by id), or with ``ids=None``
        everything of the scope. A scope never seen creates nothing."""
        async with self._tx() as conn:
            known = self._version(scope) is not None
            if known:
                await self._ensure_scope(conn, scope, now)
            turns = await tombstones.forget_everywhere(conn, scope.key, self.memory_table(scope) if known else None,
                                                       ids, now, reason, queued, short)
        await asyncio.to_thread(tombstones.clear_the_log, self.path)
        return turns

    async def forgotten_turns(self, scope: Scope, keys: Collection[str]) -> set[str]:
        wanted = sorted(k for k in keys if k)
        if not wanted or not await self._readable(scope):
            return set()
        rows = await self._select(
            f'SELECT s.turn_key FROM memory_sources AS s JOIN "{self.memory_table(scope)}" AS m ON m.id = s.memory_id '
            "WHERE s.turn_key IN (SELECT value FROM json_each(?)) AND m.status = ? AND m.status_reason = 'user'",
            (json.dumps(wanted), Status.FORGOTTEN.value))
        return {str(row[0]) for row in rows}

    async def drop_turns(self, scope: Scope, ids: Sequence[int]) -> None:
        if ids:
            async with self._tx() as conn:
                await conn.executemany("DELETE FROM pending_turns WHERE scope_key = ? AND id = ?",
                                       [(scope.key, i) for i in ids])

    async def import_rows(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, *, keep_ids: bool = True,
        sources: Mapping[int, Collection[str]] | None = None,
    ) -> list[int]:
        """Write memories with their times as they are (restore); returns their handles. ``keep_ids``
        keeps the handles (they must be unused); otherwise fresh ones are issued in the same order (old
        backups numbered memories per user)."""
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            if keep_ids:
                await conn.executemany(
                    "INSERT INTO memory_handles (id, scope_key) VALUES (?, ?)", [(m.id, scope.key) for m in memories]
                )
            else:
                handles = await writes.new_handles(conn, scope.key, len(memories))
                sources = renumbered(sources, memories, handles)
                memories = [replace(m, id=h) for m, h in zip(memories, handles, strict=True)]
            table = self.memory_table(scope)
            await conn.executemany(f'INSERT INTO "{table}" {INSERT_MEMORY}', [memory_to_row(m) for m in memories])
            for handle, keys in sorted((sources or {}).items()):
                await writes.add_sources(conn, [handle], sorted(keys))
            await journal.record(conn, scope.key, [(m.id, ChangeOp.IMPORTED) for m in memories], now)
        return [m.id for m in memories]

    async def sources_of(self, scope: Scope, ids: Sequence[int]) -> dict[int, set[str]]:
        if not ids or not await self._readable(scope):
            return {}
        found: dict[int, set[str]] = {}
        for start in range(0, len(ids), HANDLES_PER_STATEMENT):
            part = list(ids[start:start + HANDLES_PER_STATEMENT])
            rows = await self._select(
                f'SELECT s.memory_id, s.turn_key FROM memory_sources AS s JOIN "{self.memory_table(scope)}" AS m '
                f"ON m.id = s.memory_id WHERE s.memory_id IN ({marks(part)})", part)
            for mid, turn_key in rows:
                found.setdefault(int(mid), set()).add(str(turn_key))
        return found

    async def count_memories(self) -> int:
        total = 0
        async with self._tx(write=False) as conn:
            for key, version in sorted(self._versions.items()):
                table = self._table_of(key)
                # A table not upgraded yet has no status column; all of its rows are active.
                where = " WHERE status = 'active'" if version >= migrations.LIFECYCLE_VERSION else ""
                cursor = await conn.execute(f'SELECT count(*) FROM "{table}"{where}')
                row = await cursor.fetchone()
                total += int(row[0]) if row else 0
        return total

    # ---- decay and cleanup -----------------------------------------------------------------------

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        """Slices of tables, each one short transaction sent as one script (``decay.slice_script``)
        and sized to take about ``DECAY_SLICE_S``, the lock and the event loop free between them so chats
        go on. Each slice is durable on its own and every row decays by whole days since its own anchor: a
        run cut short and run again redoes nothing and misses nothing."""
        todo = deque(s for s in scopes if self._version(s) is not None)
        size = 1
        number = 0
        async with self._lock:
            await self._script(decay.START)
        while todo:
            part = [todo.popleft() for _ in range(min(size, len(todo)))]
            for scope in part:
                await self.ensure_scope(scope, now)  # an old table is upgraded first (a no-op when current)
            started = time.perf_counter()
            async with self._lock:
                await self._script(decay.slice_script(number, [(s.key, self.memory_table(s)) for s in part], now))
            took = time.perf_counter() - started
            number += 1
            size = max(1, min(MAX_DECAY_SLICE, int(len(part) * DECAY_SLICE_S / max(took, 1e-4))))
            await asyncio.sleep(0)
        rows = await self._select(decay.TOTALS)
        return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)

    # ---- typed settings and the change journal ---------------------------------------------------

    async def get_setting(self, setting: Setting[K, V], key: K) -> V | None:
        async with self._tx(write=False) as conn:
            value = await journal.get_setting(conn, setting.name.value, setting.owner(key))
        return None if value is None else setting.decode(value)

    async def all_settings(self) -> list[tuple[str, str, str]]:
        rows = await self._select("SELECT name, owner, value FROM settings ORDER BY name, owner")
        return [(str(n), str(o), str(v)) for n, o, v in rows]

    async def set_setting(self, setting: Setting[K, V], key: K, value: V) -> None:
        await self.write_whole(functools.partial(journal.put_setting, name=setting.name.value, owner=setting.owner(key),
                                                 value=setting.encode(value)))

    async def change_counter(self, scope: Scope) -> int:
        """One index lookup, queued on the connection's thread (``read``)."""
        return await self.read(functools.partial(journal.counter, scope=scope), first=True)

    async def changes_since(self, scope: Scope, after: int, limit: int) -> list[Change]:
        return journal.changes(scope, await self._select(journal.SINCE, (scope.key, after, limit)))

    async def changes_after(self, after: int, limit: int) -> list[Change]:
        return journal.every_change(await self._select(journal.AFTER, (after, max(limit, 0))))

    async def prune_changes(self, before: datetime) -> int:
        async with self._tx() as conn:
            return await journal.prune(conn, before)

    async def stream_memories(
        self, scopes: Sequence[Scope] | None = None, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[tuple[Scope, list[Memory]]]:
        for scope in await self.scopes() if scopes is None else scopes:
            after = 0
            while await self._readable(scope):
                rows = await self._select(f'SELECT {SELECT_MEMORY} FROM "{self.memory_table(scope)}" WHERE id > ? '
                                          "ORDER BY id LIMIT ?", (after, batch))
                if not rows:
                    break
                memories = [row_to_memory(row) for row in rows]
                yield scope, memories
                after = memories[-1].id

    def stream_csv(
        self, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None, tail: Sequence[str] = (), *,
        batch: int = CELL_BATCH,
    ) -> AsyncIterator[tuple[Scope, str, int]]:
        return csv_of(self.stream_memories(batch=batch), columns, tz, tail)

    # ---- pending turns (extraction queue) ---------------------------------------------------------

    async def add_turn(self, scope: Scope, turn: Turn) -> int:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, turn.at)
            cursor = await conn.execute(QUEUE_TURN, queue_params(scope.key, turn))
        return int(cursor.lastrowid or 0)

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        rows = await self._select(
            f"SELECT {TURN_COLUMNS} FROM pending_turns WHERE scope_key = ? ORDER BY id LIMIT ?", (scope.key, limit)
        )
        return [row_to_turn(r) for r in rows]

    async def scopes_with_pending(self) -> list[Scope]:
        rows = await self._select("SELECT DISTINCT scope_key FROM pending_turns ORDER BY scope_key")
        return [Scope.from_key(str(row[0])) for row in rows]

    async def count_pending(self, scope: Scope) -> int:
        rows = await self._select("SELECT count(*) FROM pending_turns WHERE scope_key = ?", (scope.key,))
        return int(rows[0][0]) if rows else 0

    async def consume_turns(
        self, scope: Scope, up_to_id: int, now: datetime, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
        sources: Sequence[str] = (),
    ) -> list[int]:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            ids = await self._write(conn, scope, inserts, updates, sources, now)
            await conn.execute("DELETE FROM pending_turns WHERE scope_key = ? AND id <= ?", (scope.key, up_to_id))
            if ids or updates:
                await conn.execute("UPDATE profiles SET dirty = 1 WHERE scope_key = ?", (scope.key,))
        return ids

    async def clear_turns(self, scope: Scope) -> None:
        async with self._tx() as conn:
            await conn.execute("DELETE FROM pending_turns WHERE scope_key = ?", (scope.key,))

    # ---- short-term memory -----------------------------------------------------------------------

    async def add_short(
        self, scope: Scope, kind: ShortKind, user: str, reply: str | None, at: datetime, *, keep: int,
        recalled: bool = False, keys: Sequence[str] = (),
    ) -> None:
        async with self._tx() as conn:
            await short_items.add(conn, scope.key, kind, user, reply, at, recalled, keep, keys)
            if kind is ShortKind.EVENT:
                await journal.record(conn, scope.key, [(None, ChangeOp.EVENTS)], at)

    async def short_items(self, scope: Scope, kind: ShortKind, limit: int) -> list[ShortItem]:
        async with self._tx(write=False) as conn:
            return await short_items.items(conn, scope.key, kind, limit)

    async def drop_short(self, scope: Scope, ids: Sequence[int] | None = None, kind: ShortKind | None = None) -> None:
        async with self._tx() as conn:
            await short_items.delete(conn, scope.key, ids, kind)
            if drops_events(ids, kind):
                await journal.record(conn, scope.key, [(None, ChangeOp.EVENTS)], utcnow())

    # ---- profiles --------------------------------------------------------------------------------

    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None:
        rows = await self._select(f"SELECT {PROFILE_COLUMNS} FROM profiles WHERE scope_key = ?", (scope.key,))
        return row_to_profile(rows[0]) if rows else None

    async def delete_profile(self, scope: Scope) -> None:
        async with self._tx() as conn:
            await conn.execute("DELETE FROM profiles WHERE scope_key = ?", (scope.key,))

    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, built_at)
            await conn.execute(
                "INSERT INTO profiles (scope_key, core, dynamic, built_at, dirty) VALUES (?, ?, ?, ?, 0) "
                "ON CONFLICT(scope_key) DO UPDATE SET core = excluded.core, dynamic = excluded.dynamic, "
                "built_at = excluded.built_at, dirty = 0",
                (scope.key, *profile_to_row(profile), to_db(built_at)),
            )

    # ---- a group chat that changed its id -------------------------------------------------------

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """One short transaction per scope (its table, rows and state move together or not at all), then
        one for the chat's own state: a CREATE and DROP TABLE cost ~10 ms in a database of thousands of
        scopes, and a big group must not hold every other user's turn for seconds. A move cut short is
        finished by the next call (Telegram's second notice) or, as the marker says one is unfinished, at
        the next start (``unfinished_moves``)."""
        async with self._tx() as conn:
            await chatmove.mark_move(conn, old_chat_id, new_chat_id, now)
            cursor = await conn.execute("SELECT key FROM scopes WHERE chat_id = ? ORDER BY key", (old_chat_id,))
            olds = [Scope.from_key(str(row[0])) for row in await cursor.fetchall()]
        for old in olds:
            new = Scope(old.user_id, new_chat_id)
            async with self._tx() as conn:
                await self._move_scope(conn, old, new, now)
                await journal.move_settings(conn, SCOPE_SETTINGS, old.key, new.key)
                for moved in (old, new):
                    await journal.record(conn, moved.key, [(None, ChangeOp.MOVED_CHAT)], now)
            self._versions.pop(old.key, None)
            self._table_ids.pop(old.key, None)
        async with self._tx() as conn:
            await journal.move_settings(conn, CHAT_SETTINGS_THAT_MOVE, str(old_chat_id), str(new_chat_id))
            await chatmove.clear_move(conn, old_chat_id)
        return olds

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        async with self._tx() as conn:
            await chatmove.mark_move(conn, old_chat_id, new_chat_id, now)

    async def unfinished_moves(self) -> list[tuple[int, int]]:
        async with self._tx(write=False) as conn:
            return await chatmove.unfinished(conn)

    async def _move_scope(self, conn: aiosqlite.Connection, old: Scope, new: Scope, now: datetime) -> None:
        await self._ensure_scope(conn, old, now)  # both tables at the current version: the same columns
        await self._ensure_scope(conn, new, now)
        await chatmove.move_scope(conn, old, new, self.memory_table(old), self.memory_table(new))
        self._pending_versions.pop(old.key, None)
        self._pending_table_ids.pop(old.key, None)

    # ---- capabilities ----------------------------------------------------------------------------

    async def open_vectors(self) -> VectorStore:
        from companion.storage.sqlite.vectors import VectorStore  # vectors imports this module

        return await VectorStore.open(self)

    def usage_log(self) -> SQLiteUsageLog:
        return SQLiteUsageLog(self)

    def maintenance(self) -> SQLiteStore:
        return self  # the snapshot and the table upgrade below, and ``path``

    async def snapshot(self, target: Path, *, standalone: bool = True) -> None:
        """A consistent copy through SQLite's online backup API, taken between our transactions.
        ``standalone=False`` leaves the copy in WAL mode for ``snapshot.make_standalone`` elsewhere: the
        switch parses the whole schema (~17 MB at 10,000 users), which the nightly backup does in its
        export process rather than in the bot's."""
        target.unlink(missing_ok=True)
        async with self._lock:
            try:
                async with aiosqlite.connect(target) as dest:
                    await self._conn.backup(dest)
                    if standalone:
                        await dest.execute(STANDALONE)
            except sqlite3.Error as exc:
                raise storage_error(exc) from exc
