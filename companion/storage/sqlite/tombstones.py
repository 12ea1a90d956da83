"""SQLite statements that forget, inside the caller's transaction: the content-free tombstone, the turns
a memory came from, and everything derived from forgotten memories (queued turns, short-term items, the
profile, the vectors) and the journal entries of what it forgot. ``SQLiteStore.apply_changes`` and
``forget_everywhere`` decide what goes and when."""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import aiosqlite

from companion.core.changes import ChangeOp
from companion.core.extraction import fingerprint
from companion.core.models import Status
from companion.core.timeutil import to_db
from companion.storage.records import forget_op
from companion.storage.rows import HANDLES_PER_STATEMENT, marks
from companion.storage.sqlite import journal, turn
from companion.storage.sqlite import short_items as shortterm

log = logging.getLogger(__name__)


async def tombstone(
    conn: aiosqlite.Connection, table: str, scope_key: str, ids: Sequence[int], now: datetime, reason: str
) -> list[int]:
    """Forget: the text, keywords and importance go at once; handle, time, reason and a one-way
    fingerprint stay. Each memory forgotten gets its journal entry; returns their handles."""
    if not ids:
        return []
    cursor = await conn.execute(
        f'SELECT id, event FROM "{table}" WHERE id IN ({marks(ids)}) AND status != ?',
        (*ids, Status.FORGOTTEN.value),
    )
    found = list(await cursor.fetchall())
    await conn.executemany(
        f'UPDATE "{table}" SET event = \'\', keywords = \'\', terms = \'\', happens = NULL, importance = 0, '
        "status = ?, status_reason = ?, fingerprint = ?, updated_at = ?, superseded_by = NULL WHERE id = ?",
        [(Status.FORGOTTEN.value, reason, fingerprint(str(event)), to_db(now), int(mid)) for mid, event in found],
    )
    gone = [int(mid) for mid, _ in found]
    await journal.record(conn, scope_key, [(mid, forget_op(reason)) for mid in gone], now)
    return gone


async def sources_of(conn: aiosqlite.Connection, ids: Sequence[int]) -> set[str]:
    keys: set[str] = set()
    for start in range(0, len(ids), HANDLES_PER_STATEMENT):
        part = ids[start:start + HANDLES_PER_STATEMENT]
        cursor = await conn.execute(
            f"SELECT turn_key FROM memory_sources WHERE memory_id IN ({marks(part)})", tuple(part))
        keys.update(str(row[0]) for row in await cursor.fetchall())
    return keys


async def forget_everywhere(
    conn: aiosqlite.Connection, scope_key: str, table: str | None, ids: Sequence[int] | None, now: datetime,
    reason: str, queued: Sequence[int], short: Sequence[int],
) -> set[str]:
    """``table`` is None for a scope whose memory table was never made. Returns the keys of the turns the
    forgotten memories came from."""
    everything = ids is None
    wanted: list[int] = []
    if table is not None:  # what is not forgotten yet, of all or of ``ids``
        cursor = await conn.execute(
            f'SELECT id FROM "{table}" WHERE status != ? AND (? OR id IN '
            "(SELECT value FROM json_each(?))) ORDER BY id",
            (Status.FORGOTTEN.value, int(everything), json.dumps(sorted(set(ids or ())))))
        wanted = [int(row[0]) for row in await cursor.fetchall()]
    keys = await sources_of(conn, wanted)
    if everything:
        await conn.execute("DELETE FROM pending_turns WHERE scope_key = ?", (scope_key,))
        await shortterm.delete(conn, scope_key, None, None)
        await journal.record(conn, scope_key, [(None, ChangeOp.EVENTS)], now)
    else:
        cursor = await conn.execute(
            "SELECT id FROM pending_turns WHERE scope_key = ? AND turn_key IN (SELECT value FROM json_each(?))",
            (scope_key, json.dumps(sorted(keys))))
        drop = {*queued, *(int(row[0]) for row in await cursor.fetchall())}
        await conn.executemany("DELETE FROM pending_turns WHERE scope_key = ? AND id = ?",
                               [(scope_key, i) for i in sorted(drop)])
        told = {*short, *await shortterm.told_by(conn, scope_key, keys)}
        await shortterm.delete(conn, scope_key, sorted(told), None)
        if told:
            await journal.record(conn, scope_key, [(None, ChangeOp.EVENTS)], now)
    gone = await tombstone(conn, table, scope_key, wanted, now, reason) if table is not None else []
    if gone or everything:
        # The profile may quote what was forgotten: it goes now and is rebuilt without it.
        await conn.execute("DELETE FROM profiles WHERE scope_key = ?", (scope_key,))
    await conn.executemany("DELETE FROM memory_vectors WHERE scope_key = ? AND handle = ?",
                           [(scope_key, mid) for mid in wanted])
    await conn.execute(turn.COUNT_FORGET, (scope_key, scope_key))
    return keys


CHECKPOINT_TRIES = 20
CHECKPOINT_PAUSE_S = 0.05


def clear_the_log(path: Path) -> None:
    """Forgotten text gone from the disk too: the database's pages were overwritten as they were written
    (``secure_delete``), and the log's copies of the pages before go with a truncating checkpoint, on a
    connection of its own (the store's keeps no state from it). Never waiting on a lock (a checkpoint that
    waits holds writers back): a database locked right now is tried again a moment later, up to a second; a
    checkpoint another connection keeps from finishing (a reader on an older snapshot, a background writer's
    transaction) leaves the pages to the next checkpoint after it.
    Blocking: run it in a thread."""
    for attempt in range(CHECKPOINT_TRIES):
        try:
            conn = sqlite3.connect(path, timeout=0)
            try:
                busy, _frames, _done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                conn.close()
        except sqlite3.OperationalError as exc:  # locked right now: try again a moment later
            log.debug("the write-ahead log could not be cleared yet: %s", exc)
        except sqlite3.Error as exc:  # the forget itself is committed; the next checkpoint clears the log
            log.debug("the write-ahead log was not cleared after a forget: %s", exc)
            return
        else:
            if not busy:
                return
            break  # a reader on an older snapshot, or a writer mid-transaction: the next checkpoint clears it
        if attempt + 1 < CHECKPOINT_TRIES:
            time.sleep(CHECKPOINT_PAUSE_S)
    log.debug("the write-ahead log is in use; forgotten text leaves it at the next checkpoint")
