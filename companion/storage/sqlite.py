"""All SQL of the project: one long-lived aiosqlite connection, WAL, explicit transactions behind a lock.

Memories live in one table per scope (``mem_u<user>``, ``mem_c<n|p><chat>_u<user>``), named only
from validated integers (see ``Scope``). Shared tables hold the scope registry, persisted profiles and
the turns still waiting for extraction. Schema changes are append-only migrations (``schema.py``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path

import aiosqlite

from companion.core import rules
from companion.core.errors import DatabaseBusyError, StorageError
from companion.core.models import (
    DynamicTrait,
    Memory,
    MemoryDraft,
    MemoryType,
    Profile,
    Scope,
    Source,
    Turn,
    Validity,
)
from companion.core.timeutil import from_db, maybe_from_db, to_db
from companion.storage import migrations as schema

BUSY_TIMEOUT_MS = 5000

_MEMORY_COLUMNS = (
    "id, event, keywords, importance, created_at, validity, last_mentioned_at, updated_at, "
    "expires_at, type, source, mention_count, last_decay_at, terms"
)


def _storage_error(exc: sqlite3.Error) -> StorageError:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return DatabaseBusyError(f"database is locked: {exc}")
    return StorageError(f"database error: {exc}")


def row_to_memory(row: Sequence[object]) -> Memory:
    (mid, event, keywords, importance, created, validity, mentioned, updated, expires,
     mtype, source, count, decayed, terms) = row
    return Memory(
        id=int(mid),  # type: ignore[call-overload]
        event=str(event),
        keywords=[k for k in str(keywords).split(",") if k],
        importance=float(importance),  # type: ignore[arg-type]
        created_at=from_db(str(created)),
        validity=Validity(str(validity)),
        last_mentioned_at=maybe_from_db(mentioned),  # type: ignore[arg-type]
        updated_at=from_db(str(updated)),
        expires_at=maybe_from_db(expires),  # type: ignore[arg-type]
        type=MemoryType(str(mtype)),
        source=Source(str(source)),
        mention_count=int(count),  # type: ignore[call-overload]
        last_decay_at=from_db(str(decayed)),
        terms=str(terms or "").split(),
    )


class Storage:
    """The database. Every public method is one short transaction; none awaits anything but SQLite."""

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self._conn = conn
        self._lock = asyncio.Lock()
        self._known_tables: set[str] = set()
        # Tables created inside the open transaction: known only once it commits, because a rollback
        # takes the CREATE TABLE with it and a stale entry would make every later query fail.
        self._new_tables: set[str] = set()
        self.path = path

    # ---- lifecycle -------------------------------------------------------------------------------

    @classmethod
    async def open(cls, path: Path) -> Storage:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = await aiosqlite.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.Error as exc:
            raise _storage_error(exc) from exc
        storage = cls(conn, path)
        try:
            await storage._setup()
        except BaseException:
            await conn.close()
            raise
        return storage

    async def _setup(self) -> None:
        try:
            await self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            await self._conn.execute("PRAGMA journal_mode = WAL")
            await self._conn.execute("PRAGMA synchronous = NORMAL")
            await self._conn.execute("PRAGMA foreign_keys = ON")
            await self._register_functions()
            async with self.transaction() as conn:
                await schema.migrate(conn)
                self._known_tables = set(await schema.memory_tables(conn))
        except sqlite3.DatabaseError as exc:
            raise _storage_error(exc) from exc

    async def _register_functions(self) -> None:
        await self._conn.create_function("decayed_importance", 5, _sql_decayed_importance, deterministic=True)
        await self._conn.create_function("decay_anchor", 3, _sql_decay_anchor, deterministic=True)
        await self._conn.create_function("removal_reason", 5, _sql_removal_reason, deterministic=True)

    async def close(self) -> None:
        await self._conn.close()

    @asynccontextmanager
    async def transaction(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        """A transaction behind the process-wide lock; commit on success, roll back on any error.

        Writes take the write lock up front (BEGIN IMMEDIATE) so they fail fast instead of deadlocking
        mid-way; reads use a deferred BEGIN, which WAL lets through while another process writes."""
        async with self._lock:
            try:
                await self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as exc:
                raise _storage_error(exc) from exc
            self._new_tables.clear()
            try:
                yield self._conn
            except BaseException:
                self._new_tables.clear()
                await self._rollback()
                raise
            try:
                await self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._new_tables.clear()
                await self._rollback()
                raise _storage_error(exc) from exc
            self._known_tables |= self._new_tables
            self._new_tables.clear()

    async def _rollback(self) -> None:
        # SQLite rolls back by itself on some errors (disk full, I/O); a second ROLLBACK would then fail
        # with "no transaction is active" and hide the error that matters.
        if self._conn.in_transaction:
            await self._conn.execute("ROLLBACK")

    @asynccontextmanager
    async def _tx(self, *, write: bool = True) -> AsyncIterator[aiosqlite.Connection]:
        try:
            async with self.transaction(write=write) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise _storage_error(exc) from exc

    async def data_version(self) -> int:
        """Changes when another connection (an operator's CLI) commits; our own commits do not count."""
        async with self._lock:
            cursor = await self._conn.execute("PRAGMA data_version")
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    # ---- scopes ----------------------------------------------------------------------------------

    async def ensure_scope(self, scope: Scope, now: datetime) -> None:
        if scope.table in self._known_tables:
            return
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)

    async def _ensure_scope(self, conn: aiosqlite.Connection, scope: Scope, now: datetime) -> None:
        if scope.table in self._known_tables or scope.table in self._new_tables:
            return
        await conn.execute(
            "INSERT OR IGNORE INTO scopes (key, user_id, chat_id, created_at) VALUES (?, ?, ?, ?)",
            (scope.key, scope.user_id, scope.chat_id, to_db(now)),
        )
        await schema.create_memory_table(conn, scope.key, scope.table)
        self._new_tables.add(scope.table)

    async def scopes(self) -> list[Scope]:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute("SELECT key FROM scopes ORDER BY key")
            rows = await cursor.fetchall()
        return [Scope.from_key(str(row[0])) for row in rows]

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            await conn.execute("UPDATE scopes SET active = ? WHERE key = ?", (int(active), scope.key))

    async def active_scopes(self) -> set[Scope]:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute("SELECT key FROM scopes WHERE active = 1")
            rows = await cursor.fetchall()
        return {Scope.from_key(str(row[0])) for row in rows}

    # ---- memories --------------------------------------------------------------------------------

    async def fetch_memories(self, scope: Scope) -> list[Memory]:
        if scope.table not in self._known_tables:
            return []
        async with self._tx(write=False) as conn:
            cursor = await conn.execute(f'SELECT {_MEMORY_COLUMNS} FROM "{scope.table}" ORDER BY id')
            rows = await cursor.fetchall()
        return [row_to_memory(row) for row in rows]

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        if not ids or scope.table not in self._known_tables:
            return []
        marks = ", ".join("?" for _ in ids)
        async with self._tx(write=False) as conn:
            cursor = await conn.execute(
                f'SELECT {_MEMORY_COLUMNS} FROM "{scope.table}" WHERE id IN ({marks}) ORDER BY id', tuple(ids)
            )
            rows = await cursor.fetchall()
        return [row_to_memory(row) for row in rows]

    async def apply_changes(
        self,
        scope: Scope,
        now: datetime,
        inserts: Sequence[MemoryDraft] = (),
        updates: Sequence[Memory] = (),
        deletes: Iterable[int] = (),
    ) -> list[int]:
        """Insert, update and delete memories of one scope in one transaction; returns the new ids.

        Any change marks the scope's profile stale, so the next prompt never shows a forgotten memory.
        """
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            ids = [await self._insert(conn, scope, draft, now) for draft in inserts]
            for memory in updates:
                await self._update(conn, scope, memory)
            delete_ids = [(mid,) for mid in deletes]
            if delete_ids:
                await conn.executemany(f'DELETE FROM "{scope.table}" WHERE id = ?', delete_ids)
            if ids or updates or delete_ids:
                await conn.execute("UPDATE profiles SET dirty = 1 WHERE scope_key = ?", (scope.key,))
        return ids

    async def _insert(self, conn: aiosqlite.Connection, scope: Scope, draft: MemoryDraft, now: datetime) -> int:
        created = draft.created_at or now
        cursor = await conn.execute(
            f'INSERT INTO "{scope.table}" (event, keywords, importance, created_at, validity, updated_at, '
            "expires_at, type, source, mention_count, last_decay_at, terms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
            (
                draft.event, ",".join(draft.keywords), rules.clamp_importance(draft.importance),
                to_db(created), draft.validity.value, to_db(now),
                _maybe_db(rules.expires_at(created, draft.validity)), draft.type.value,
                draft.source.value, to_db(min(created, now)), " ".join(draft.terms),
            ),
        )
        if cursor.lastrowid is None:
            raise StorageError("insert returned no row id")
        return cursor.lastrowid

    async def _update(self, conn: aiosqlite.Connection, scope: Scope, memory: Memory) -> None:
        await conn.execute(
            f'UPDATE "{scope.table}" SET event = ?, keywords = ?, importance = ?, created_at = ?, validity = ?, '
            "last_mentioned_at = ?, updated_at = ?, expires_at = ?, type = ?, source = ?, mention_count = ?, "
            "last_decay_at = ?, terms = ? WHERE id = ?",
            (
                memory.event, ",".join(memory.keywords), rules.clamp_importance(memory.importance),
                to_db(memory.created_at), memory.validity.value, _maybe_db(memory.last_mentioned_at),
                to_db(memory.updated_at), _maybe_db(memory.expires_at), memory.type.value,
                memory.source.value, memory.mention_count, to_db(memory.last_decay_at), " ".join(memory.terms),
                memory.id,
            ),
        )

    async def mark_mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        if not ids or scope.table not in self._known_tables:
            return
        async with self._tx() as conn:
            await conn.executemany(
                f'UPDATE "{scope.table}" SET last_mentioned_at = ?, mention_count = mention_count + 1 '
                "WHERE id = ?",
                [(to_db(now), mid) for mid in ids],
            )

    async def import_rows(self, scope: Scope, memories: Sequence[Memory], now: datetime) -> None:
        """Write memories with their original ids and times (restore). The scope must be empty."""
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            await conn.executemany(
                f'INSERT INTO "{scope.table}" ({_MEMORY_COLUMNS}) VALUES ({", ".join("?" * 14)})',
                [_memory_params(m) for m in memories],
            )

    async def count_memories(self) -> int:
        total = 0
        async with self._tx(write=False) as conn:
            for table in sorted(self._known_tables):
                cursor = await conn.execute(f'SELECT count(*) FROM "{table}"')
                row = await cursor.fetchone()
                total += int(row[0]) if row else 0
        return total

    # ---- decay and cleanup -----------------------------------------------------------------------

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        """Decay every non-permanent row of these scopes and delete what the cleanup rules remove.

        Returns (rows decayed, rows removed). Rules are the pure functions in ``rules``, called from SQL.
        """
        decayed = removed = 0
        stamp, day_ago = to_db(now), to_db(now - rules.DAY)
        async with self._tx() as conn:
            for scope in scopes:
                if scope.table not in self._known_tables:
                    continue
                cursor = await conn.execute(
                    f'UPDATE "{scope.table}" SET importance = decayed_importance(importance, validity, '
                    "last_decay_at, last_mentioned_at, ?), last_decay_at = decay_anchor(validity, last_decay_at, ?) "
                    "WHERE validity != 'permanent' AND last_decay_at <= ?",
                    (stamp, stamp, day_ago),
                )
                decayed += max(cursor.rowcount, 0)
                gone = await self._clean(conn, scope, stamp)
                removed += gone
                if gone:
                    await conn.execute("UPDATE profiles SET dirty = 1 WHERE scope_key = ?", (scope.key,))
            await conn.execute(
                "INSERT INTO meta (key, value) VALUES ('last_decay_at', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (stamp,),
            )
        return decayed, removed

    async def _clean(self, conn: aiosqlite.Connection, scope: Scope, stamp: str) -> int:
        table = scope.table
        cursor = await conn.execute(
            f'DELETE FROM "{table}" WHERE removal_reason(importance, validity, expires_at, last_mentioned_at, ?) '
            "IS NOT NULL",
            (stamp,),
        )
        removed = max(cursor.rowcount, 0)
        # A lower-value copy of the same event text is noise; permanent rows are never removed here.
        cursor = await conn.execute(
            f'DELETE FROM "{table}" WHERE validity != \'permanent\' AND EXISTS (SELECT 1 FROM "{table}" AS o '
            f'WHERE o.event = "{table}".event AND o.id != "{table}".id AND (o.importance > "{table}".importance '
            f'OR (o.importance = "{table}".importance AND o.id > "{table}".id)))'
        )
        return removed + max(cursor.rowcount, 0)

    async def get_meta(self, key: str) -> str | None:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute("SELECT value FROM meta WHERE key = ?", (key,))
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    # ---- pending turns (extraction queue) ---------------------------------------------------------

    async def add_turn(self, scope: Scope, turn: Turn) -> int:
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, turn.at)
            cursor = await conn.execute(
                "INSERT INTO pending_turns (scope_key, user_text, reply_text, created_at) VALUES (?, ?, ?, ?)",
                (scope.key, turn.user, turn.reply, to_db(turn.at)),
            )
        return int(cursor.lastrowid or 0)

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute(
                "SELECT id, user_text, reply_text, created_at FROM pending_turns WHERE scope_key = ? "
                "ORDER BY id LIMIT ?",
                (scope.key, limit),
            )
            rows = await cursor.fetchall()
        return [Turn(user=str(r[1]), reply=r[2], at=from_db(str(r[3])), id=int(r[0])) for r in rows]

    async def scopes_with_pending(self) -> list[Scope]:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute("SELECT DISTINCT scope_key FROM pending_turns ORDER BY scope_key")
            rows = await cursor.fetchall()
        return [Scope.from_key(str(row[0])) for row in rows]

    async def count_pending(self, scope: Scope) -> int:
        async with self._tx(write=False) as conn:
            cursor = await conn.execute("SELECT count(*) FROM pending_turns WHERE scope_key = ?", (scope.key,))
            row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def consume_turns(
        self, scope: Scope, up_to_id: int, now: datetime, inserts: Sequence[MemoryDraft],
        updates: Sequence[Memory],
    ) -> list[int]:
        """Write extracted memories and drop the turns they came from, atomically: either both or neither."""
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, now)
            ids = [await self._insert(conn, scope, draft, now) for draft in inserts]
            for memory in updates:
                await self._update(conn, scope, memory)
            await conn.execute(
                "DELETE FROM pending_turns WHERE scope_key = ? AND id <= ?", (scope.key, up_to_id)
            )
            if ids or updates:
                await conn.execute("UPDATE profiles SET dirty = 1 WHERE scope_key = ?", (scope.key,))
        return ids

    async def clear_turns(self, scope: Scope) -> None:
        async with self._tx() as conn:
            await conn.execute("DELETE FROM pending_turns WHERE scope_key = ?", (scope.key,))

    # ---- profiles --------------------------------------------------------------------------------

    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None:
        """The persisted profile and whether it is stale (memories changed since it was built)."""
        async with self._tx(write=False) as conn:
            cursor = await conn.execute(
                "SELECT core, dynamic, built_at, dirty FROM profiles WHERE scope_key = ?", (scope.key,)
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        traits = [DynamicTrait(str(t["text"]), tuple(t["keywords"])) for t in json.loads(str(row[1]))]
        return Profile(core=str(row[0]), dynamic=traits, built_at=from_db(str(row[2]))), bool(row[3])

    async def delete_profile(self, scope: Scope) -> None:
        async with self._tx() as conn:
            await conn.execute("DELETE FROM profiles WHERE scope_key = ?", (scope.key,))

    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None:
        dynamic = json.dumps(
            [{"text": t.text, "keywords": list(t.keywords)} for t in profile.dynamic], ensure_ascii=False
        )
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, built_at)
            await conn.execute(
                "INSERT INTO profiles (scope_key, core, dynamic, built_at, dirty) VALUES (?, ?, ?, ?, 0) "
                "ON CONFLICT(scope_key) DO UPDATE SET core = excluded.core, dynamic = excluded.dynamic, "
                "built_at = excluded.built_at, dirty = 0",
                (scope.key, profile.core, dynamic, to_db(built_at)),
            )

    # ---- backup ----------------------------------------------------------------------------------

    async def snapshot(self, target: Path) -> None:
        """A consistent copy through SQLite's online backup API, taken between our transactions."""
        target.unlink(missing_ok=True)
        async with self._lock:
            try:
                async with aiosqlite.connect(target) as dest:
                    await self._conn.backup(dest)
                    # The copy inherits WAL mode; a standalone file must not need -wal/-shm beside it
                    # (a read-only reader would leave them behind in the backup folder).
                    await dest.execute("PRAGMA journal_mode = DELETE")
            except sqlite3.Error as exc:
                raise _storage_error(exc) from exc


def _maybe_db(moment: datetime | None) -> str | None:
    return None if moment is None else to_db(moment)


def _memory_params(m: Memory) -> tuple[object, ...]:
    return (
        m.id, m.event, ",".join(m.keywords), rules.clamp_importance(m.importance), to_db(m.created_at),
        m.validity.value, _maybe_db(m.last_mentioned_at), to_db(m.updated_at), _maybe_db(m.expires_at),
        m.type.value, m.source.value, m.mention_count, to_db(m.last_decay_at), " ".join(m.terms),
    )


def _sql_decayed_importance(
    importance: float, validity: str, anchor: str, mentioned: str | None, now: str
) -> float:
    value, _ = rules.decay(importance, Validity(validity), from_db(anchor), maybe_from_db(mentioned), from_db(now))
    return value


def _sql_decay_anchor(validity: str, anchor: str, now: str) -> str:
    _, new_anchor = rules.decay(0.0, Validity(validity), from_db(anchor), None, from_db(now))
    return to_db(new_anchor)


def _sql_removal_reason(
    importance: float, validity: str, expires: str | None, mentioned: str | None, now: str
) -> str | None:
    return rules.removal_reason(
        importance, Validity(validity), maybe_from_db(expires), maybe_from_db(mentioned), from_db(now)
    )
