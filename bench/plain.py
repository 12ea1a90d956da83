"""The same work as the daily jobs done the plainest possible way, timed in the same run on the same data.

Both read the nightly snapshot (taken before decay), so they see exactly the rows the engine's own jobs
see. Decay: one plain ``UPDATE`` per table with the formula of ``core.rules.decay`` written inline, then one
plain ``DELETE`` per table of the faded and expired rows (the cleanup without tombstones, duplicates or
the exemptions), all in one transaction, through the ``sqlite3`` module (no event loop, no slices, no
thread hops); the decay statements alone are timed too. Backup: the csv
module alone writing every table's raw rows (``SELECT *``), one file per table, without formatting,
header, fsync or rename. The ratio engine / plain says what the engine's extras cost.
"""

from __future__ import annotations

import csv
import shutil
import sqlite3
import time
from datetime import datetime
from pathlib import Path

from companion.core import rules
from companion.core.models import Scope
from companion.core.timeutil import to_db
from companion.storage.sqlite import spares
from companion.storage.sqlite.decay import DECAY

# The engine's own decay statement is already the plain one (one inline UPDATE per table); what the
# engine adds is the cleanup statement, the slices and the event loop.
PLAIN_DECAY = DECAY
PLAIN_CLEAN = (f'DELETE FROM "{{table}}" WHERE importance < {rules.CLEANUP_BELOW} '
               "OR (expires_at IS NOT NULL AND expires_at <= :stamp)")


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT key, table_id FROM scopes ORDER BY key")
    return [spares.table_name(Scope.from_key(str(k)).key, t) for k, t in rows]


def plain_decay(snapshot: Path, workdir: Path, now: datetime) -> dict[str, float]:
    """Seconds for one UPDATE (decay) and one DELETE (cleanup) per table on a copy of the snapshot, the
    UPDATEs' share, and the rows they changed."""
    copy = workdir / "plain-decay.sqlite3"
    shutil.copyfile(snapshot, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        params = {"now": int(now.timestamp()), "day_ago": to_db(now - rules.DAY)}
        tables = _tables(conn)
        clean = {"stamp": to_db(now)}
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        changed = removed = 0
        decay_s = 0.0
        for table in tables:
            mark = time.perf_counter()
            changed += conn.execute(PLAIN_DECAY.format(table=table), params).rowcount
            decay_s += time.perf_counter() - mark
            removed += conn.execute(PLAIN_CLEAN.format(table=table), clean).rowcount
        conn.execute("COMMIT")
        took = time.perf_counter() - started
    finally:
        conn.close()
    for leftover in workdir.glob("plain-decay.sqlite3*"):
        leftover.unlink()
    return {"seconds": round(took, 2), "decay_only_s": round(decay_s, 2), "tables": len(tables), "decayed": changed,
            "removed": removed}


def plain_csv(snapshot: Path, workdir: Path) -> dict[str, float]:
    """Seconds for the csv module alone to write every table's raw rows, one file per table."""
    folder = workdir / "plain-csv"
    folder.mkdir(exist_ok=True)
    conn = sqlite3.connect(f"file:{snapshot}?mode=ro", uri=True)
    rows = 0
    try:
        tables = _tables(conn)
        started = time.perf_counter()
        conn.execute("BEGIN")
        for table in tables:
            with (folder / f"{table}.csv").open("w", encoding="utf-8", newline="") as handle:
                writer = csv.writer(handle)
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    writer.writerow(row)
                    rows += 1
        conn.execute("COMMIT")
        took = time.perf_counter() - started
    finally:
        conn.close()
    shutil.rmtree(folder)
    return {"seconds": round(took, 2), "files": len(tables), "rows": rows}
