"""SQLite's side of one turn (``turns``): its read and its write, each one transaction run in one go on
the plain ``sqlite3`` connection by a caller that holds the store's lock (so no other thread uses the
connection meanwhile). Also the statements ``SQLiteStore`` shares with them: queueing a turn, an access,
a mention."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from companion.core.models import ShortKind, Status, Turn
from companion.core.timeutil import to_db
from companion.storage import journal, shortterm
from companion.storage.migrations import Migration, MigrationSet, register
from companion.storage.rows import PROFILE_COLUMNS, SELECT_MEMORY, marks, row_to_memory, row_to_profile, turn_to_row
from companion.storage.turns import TurnRecord, TurnView

TURN_STATE = MigrationSet("turn_state", (
    # Per-scope conversation state every worker process must see: the memory an "edit" press waits on.
    Migration("0001_pending_edits", """
    CREATE TABLE turn_state (
        scope_key TEXT PRIMARY KEY,
        editing INTEGER
    )
    """),
))
register(TURN_STATE)

SET_EDITING = ("INSERT INTO turn_state (scope_key, editing) VALUES (?, ?) "
               "ON CONFLICT(scope_key) DO UPDATE SET editing = excluded.editing")

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
    conn: sqlite3.Connection, key: str, table: str | None, events: int, turns: int, memories: bool
) -> TurnView:
    """``TurnBatch.turn_context`` in one read transaction; ``table``: the scope's memory table (None when
    the scope has none)."""
    conn.execute("BEGIN")
    try:
        change = conn.execute(journal.COUNTER, (key,)).fetchone()
        scope = conn.execute("SELECT active FROM scopes WHERE key = ?", (key,)).fetchone()
        profile = conn.execute(f"SELECT {PROFILE_COLUMNS} FROM profiles WHERE scope_key = ?", (key,)).fetchone()
        state = conn.execute("SELECT editing FROM turn_state WHERE scope_key = ?", (key,)).fetchone()
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
        change=int(change[0]) if change else 0, active=bool(scope[0]) if scope else False,
        profile=row_to_profile(profile) if profile else None, events=shortterm.to_items(told, ShortKind.EVENT),
        turns=shortterm.to_items(said, ShortKind.TURN),
        memories=None if rows is None else [row_to_memory(r) for r in rows],
        editing=None if state is None or state[0] is None else int(state[0]),
    )


def write_turn(conn: sqlite3.Connection, key: str, table: str | None, done: TurnRecord) -> None:
    """``TurnBatch.record_turn`` in one write transaction; all or nothing."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if done.short is not None:
            turn = done.short
            added, trim = shortterm.add_params(key, ShortKind.TURN, turn.user, turn.reply, turn.at, done.recalled,
                                               done.keep, () if turn.key is None else (turn.key,))
            conn.execute(shortterm.ADD, added)
            conn.execute(shortterm.TRIM, trim)
        conn.executemany(QUEUE_TURN, [queue_params(key, t) for t in done.queued])
        if table is not None:
            _count(conn, table, done.touched, done.mentioned, done.at)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _count(
    conn: sqlite3.Connection, table: str, touched: Sequence[int], mentioned: Sequence[int], at: datetime
) -> None:
    if touched:
        conn.execute(touch_sql(table, len(touched)), (to_db(at), *touched))
    if mentioned:
        conn.executemany(mention_sql(table), [(to_db(at), mid) for mid in mentioned])
