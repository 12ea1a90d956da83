"""SQLite's side of one turn (``turns``): its read, one transaction run in one go on the plain ``sqlite3``
connection by a caller that holds the store's lock (so no other thread uses the connection meanwhile);
its write, in the caller's transaction; and the pending edit. ``TurnCalls`` is the part of ``SQLiteStore``
that offers them. Also the statements ``SQLiteStore`` shares with them: queueing a turn, an access, a
mention."""

from __future__ import annotations

import functools
import sqlite3
from datetime import datetime

from companion.core.models import Scope, ShortKind, Status, Turn
from companion.core.timeutil import from_db, to_db
from companion.core.turnview import TurnView
from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.rows import PROFILE_COLUMNS, SELECT_MEMORY, marks, row_to_memory, row_to_profile, turn_to_row
from companion.storage.sqlite import journal, migrations
from companion.storage.sqlite import short_items as shortterm
from companion.storage.sqlite.connection import Connection
from companion.storage.sqlite.migrations import register
from companion.storage.turns import TurnRecord, setting_fields, setting_keys

TURN_STATE = MigrationSet("turn_state", (
    # Per-scope conversation state every worker process must see: the memory an "edit" press waits on.
    Migration("0001_pending_edits", """
    CREATE TABLE turn_state (
        scope_key TEXT PRIMARY KEY,
        editing INTEGER
    )
    """),
    # The conversation's small state (recall cooldowns, the extraction countdown...), as its host encodes
    # it: a worker that takes the chat over continues where the last one left off.
    # And when the last "how to start" hint went out, so a burst spread over two workers gets one.
    Migration("0002_conversation", """
    ALTER TABLE turn_state ADD COLUMN conversation TEXT;
    ALTER TABLE turn_state ADD COLUMN hinted_at TEXT
    """),
    # When the user last said something (``TurnRecord.said_at``): the follow-up round reads it for every
    # user at once.
    Migration("0003_said_at", "ALTER TABLE turn_state ADD COLUMN said_at TEXT"),
    # How many forgets the scope has had (``TurnView.forgot``): a conversation another process holds reads
    # its turns again when it moved.
    Migration("0004_forgets", "ALTER TABLE turn_state ADD COLUMN forgets INTEGER NOT NULL DEFAULT 0"),
))
register(TURN_STATE)

SET_EDITING = ("INSERT INTO turn_state (scope_key, editing) VALUES (?, ?) "
               "ON CONFLICT(scope_key) DO UPDATE SET editing = excluded.editing")
SET_CONVERSATION = ("INSERT INTO turn_state (scope_key, conversation, said_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(scope_key) DO UPDATE SET conversation = excluded.conversation, "
                    "said_at = coalesce(excluded.said_at, turn_state.said_at)")
SET_HINTED = ("INSERT INTO turn_state (scope_key, hinted_at) VALUES (?, ?) "
              "ON CONFLICT(scope_key) DO UPDATE SET hinted_at = excluded.hinted_at")
STATE = "SELECT editing, conversation, hinted_at, forgets FROM turn_state WHERE scope_key = ?"
# In a forget's transaction; a scope never seen gets no row.
COUNT_FORGET = ("INSERT INTO turn_state (scope_key, forgets) SELECT ?, 1 WHERE EXISTS (SELECT 1 FROM scopes WHERE "
                "key = ?) ON CONFLICT(scope_key) DO UPDATE SET forgets = turn_state.forgets + 1")
# The three settings ``TurnView`` carries, in one statement (each pair a primary-key lookup).
SETTINGS = ("SELECT name, value FROM settings WHERE (name = ? AND owner = ?) OR (name = ? AND owner = ?) "
            "OR (name = ? AND owner = ?)")

QUEUE_TURN = ("INSERT INTO pending_turns (scope_key, user_text, reply_text, created_at, chat_id, message_id, "
              "turn_key) VALUES (?, ?, ?, ?, ?, ?, ?)")


def touch_sql(table: str, count: int) -> str:
    return (f'UPDATE "{table}" SET last_accessed_at = ?, access_count = access_count + 1 '
            f"WHERE id IN ({marks(range(count))})")


def mention_sql(table: str) -> str:
    return f'UPDATE "{table}" SET last_mentioned_at = ?, mention_count = mention_count + 1 WHERE id = ?'


def queue_params(key: str, turn: Turn) -> tuple[object, ...]:
    return (key, *turn_to_row(turn))


def read_turn(
    conn: sqlite3.Connection, scope: Scope, table: str | None, events: int, turns: int, memories: bool
) -> TurnView:
    """``TurnBatch.turn_context`` in one read transaction; ``table``: the scope's memory table (None when
    the scope has none)."""
    key = scope.key
    conn.execute("BEGIN")
    try:
        change = conn.execute(journal.COUNTER, (key,)).fetchone()
        mode = conn.execute("SELECT active FROM scopes WHERE key = ?", (key,)).fetchone()
        profile = conn.execute(f"SELECT {PROFILE_COLUMNS} FROM profiles WHERE scope_key = ?", (key,)).fetchone()
        named = setting_keys(scope)
        found = dict(conn.execute(SETTINGS, [part for pair in named for part in pair]).fetchall())
        state = conn.execute(STATE, (key,)).fetchone()
        told = conn.execute(shortterm.ITEMS, (key, ShortKind.EVENT.value, events)).fetchall()
        said = conn.execute(shortterm.ITEMS, (key, ShortKind.TURN.value, turns)).fetchall() if turns > 0 else []
        rows = None
        if memories:
            rows = [] if table is None else conn.execute(
                f'SELECT {SELECT_MEMORY} FROM "{table}" WHERE status = ? ORDER BY id', (Status.ACTIVE.value,)
            ).fetchall()
    finally:
        conn.execute("COMMIT")  # a read: nothing to keep or undo
    return TurnView(
        change=int(change[0]) if change else 0, active=bool(mode[0]) if mode else False,
        profile=row_to_profile(profile) if profile else None, events=shortterm.to_items(told, ShortKind.EVENT),
        turns=shortterm.to_items(said, ShortKind.TURN),
        memories=None if rows is None else [row_to_memory(r) for r in rows],
        editing=None if state is None or state[0] is None else int(state[0]),
        conversation=None if state is None or not state[1] else str(state[1]),
        hinted_at=None if state is None or state[2] is None else from_db(state[2]),
        forgot=0 if state is None else int(state[3]),
        **setting_fields([None if found.get(name) is None else str(found[name]) for name, _ in named]),
    )


def write_turn(conn: sqlite3.Connection, key: str, table: str | None, done: TurnRecord) -> None:
    """``TurnBatch.record_turn``'s statements, in the caller's transaction, on the connection's thread."""
    if done.short is not None:
        turn = done.short
        added, trim = shortterm.add_params(key, ShortKind.TURN, turn.user, turn.reply, turn.at, done.recalled,
                                           done.keep, () if turn.key is None else (turn.key,))
        conn.execute(shortterm.ADD, added)
        conn.execute(shortterm.TRIM, trim)
    if done.queued:
        conn.executemany(QUEUE_TURN, [queue_params(key, t) for t in done.queued])
    if table is not None and done.touched:
        conn.execute(touch_sql(table, len(done.touched)), (to_db(done.at), *done.touched))
    if table is not None and done.mentioned:
        conn.executemany(mention_sql(table), [(to_db(done.at), mid) for mid in done.mentioned])
    if done.conversation is not None:
        said = done.said_at
        conn.execute(SET_CONVERSATION, (key, done.conversation or None, None if said is None else to_db(said)))


class TurnCalls(Connection):
    """``TurnBatch`` on the store's connection; ``SQLiteStore`` inherits it."""

    async def turn_context(self, scope: Scope, *, events: int, turns: int = 0, memories: bool = False) -> TurnView:
        """One read transaction queued on the connection's thread (``Connection.read``), ahead of background
        work."""
        if memories:
            await self._readable(scope)  # a stale table is upgraded first
        table = None if self._version(scope) is None else self.memory_table(scope)
        return await self.read(functools.partial(read_turn, scope=scope, table=table, events=events, turns=turns,
                                                 memories=memories), first=True)

    async def record_turn(self, scope: Scope, record: TurnRecord) -> None:
        """One write transaction on the connection's thread, like every other write: a statement sent
        whole to another thread (``asyncio.to_thread``) waited on the GIL once per statement and made a
        busy bot's turns three times slower. Its statements go there together, one hand-over a turn."""
        version = self._version(scope)
        if version == migrations.CURRENT_TABLE_VERSION or not (record.queued or record.touched or record.mentioned):
            # The usual turn: nothing to register or upgrade first, so the whole transaction goes to the
            # connection's thread at once (``write_whole``) instead of a hand-over per statement.
            table = None if version is None else self.memory_table(scope)
            await self.write_whole(functools.partial(write_turn, key=scope.key, table=table, done=record),
                                   first=True)
            return
        async with self._tx() as conn:
            await self._ensure_scope(conn, scope, record.at)  # registered, and its table current
            table = None if self._version(scope) is None else self.memory_table(scope)
            await self._on_thread(functools.partial(write_turn, key=scope.key, table=table, done=record))

    async def set_editing(self, scope: Scope, handle: int | None) -> None:
        async with self._tx() as conn:
            await conn.execute(SET_EDITING, (scope.key, handle))

    async def set_hinted(self, scope: Scope, at: datetime) -> None:
        async with self._tx() as conn:
            await conn.execute(SET_HINTED, (scope.key, to_db(at)))
