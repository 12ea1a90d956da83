"""Reading a snapshot file (``SQLiteStore.snapshot``) outside the store: the SQLite-specific half of backup
and restore. Blocking ``sqlite3`` calls on a read-only connection: run them in a thread.

Rows are streamed from one read transaction, so a CSV export sees exactly one state of the snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, tzinfo
from pathlib import Path

from companion.core.cells import CellColumn
from companion.core.errors import InvalidScopeError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import from_db
from companion.storage.cellsql import finisher, select_cells
from companion.storage.sqlite import migrations, spares


class SnapshotReader:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._tables: dict[str, str] | None = None

    def scopes(self) -> list[tuple[Scope, int]]:
        """Every registered scope with its memory table version, in key order."""
        rows = self._conn.execute("SELECT key, table_version FROM scopes ORDER BY key").fetchall()
        return [(Scope.from_key(str(k)), int(v)) for k, v in rows]

    def _table(self, scope: Scope) -> str:
        if self._tables is None:
            # Snapshots from before spare tables have no ``table_id``: every table is ``mem_<key>``.
            columns = {str(row[1]) for row in self._conn.execute("PRAGMA table_info(scopes)")}
            rows = []
            if "table_id" in columns:
                rows = self._conn.execute("SELECT key, table_id FROM scopes WHERE table_id IS NOT NULL").fetchall()
            self._tables = {str(k): spares.table_name(str(k), int(t)) for k, t in rows}
        return self._tables.get(scope.key, scope.table)

    def cell_rows(
        self, scope: Scope, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None
    ) -> Iterator[tuple[object, ...]]:
        """The scope's memories by handle, each as the cells ``core.cells.memory_cells`` would give it,
        formatted in SQL (``cellsql``). A table that cannot be read raises StorageError (a damaged page:
        the caller may go on with the other scopes)."""
        select = ", ".join(select_cells(columns, offset))
        finish = finisher(columns, tz, offset)
        try:
            rows = self._conn.execute(f'SELECT {select} FROM "{self._table(scope)}" ORDER BY id')
            yield from rows if finish is None else map(finish, rows)
        except sqlite3.DatabaseError as exc:
            raise StorageError(str(exc)) from None

    def count(self) -> tuple[int, int]:
        """(scopes, memories) of the snapshot; every registered scope must have a readable table."""
        scopes = self.scopes()
        rows = 0
        for scope, version in scopes:
            where = " WHERE status = 'active'" if version >= migrations.LIFECYCLE_VERSION else ""
            found = self._conn.execute(f'SELECT count(*) FROM "{self._table(scope)}"{where}').fetchone()
            rows += int(found[0])
        return len(scopes), rows

    def tally(self) -> tuple[int, int, int]:
        """(scopes, memories, tombstones): every row not forgotten is a memory (active, archived or
        superseded); a forgotten one is a tombstone, counted apart."""
        scopes = self.scopes()
        memories = tombstones = 0
        for scope, version in scopes:
            table = self._table(scope)
            if version < migrations.LIFECYCLE_VERSION:  # no status column yet: every row is active
                found = self._conn.execute(f'SELECT count(*), 0 FROM "{table}"').fetchone()
            else:
                found = self._conn.execute(f"SELECT total(status != 'forgotten'), total(status = 'forgotten') "
                                           f'FROM "{table}"').fetchone()
            memories += int(found[0])
            tombstones += int(found[1])
        return len(scopes), memories, tombstones

    def tombstones(self) -> Iterator[tuple[Scope, int, str, str, datetime]]:
        """Every forgotten memory: (scope, handle, fingerprint, reason, when); content-free by design."""
        for scope, version in self.scopes():
            if version < migrations.LIFECYCLE_VERSION:
                continue
            rows = self._conn.execute(
                f"SELECT id, fingerprint, status_reason, updated_at FROM \"{self._table(scope)}\" "
                "WHERE status = 'forgotten'")
            for mid, print_, reason, at in rows:
                yield scope, int(mid), str(print_ or ""), str(reason or ""), from_db(str(at))

    def has_pending_turns(self) -> bool:
        return self._conn.execute("SELECT 1 FROM pending_turns LIMIT 1").fetchone() is not None

    def integrity(self) -> str:
        found = self._conn.execute("PRAGMA integrity_check").fetchone()
        return "no answer" if found is None else str(found[0])


@contextmanager
def open_snapshot(path: Path) -> Iterator[SnapshotReader]:
    """A read-only view of a snapshot; StorageError if it is not a usable one."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise StorageError(f"{path.name} is not a readable database: {exc}") from None
    try:
        conn.execute("BEGIN")
        yield SnapshotReader(conn)
    except (sqlite3.Error, InvalidScopeError) as exc:
        raise StorageError(f"{path.name} is not a usable snapshot: {exc}") from None
    finally:
        conn.close()


# A copy made by the backup API inherits WAL mode; a standalone file must not need -wal/-shm beside it
# (a read-only reader would leave them behind in the backup folder).
STANDALONE = "PRAGMA journal_mode = DELETE"


def make_standalone(path: Path) -> None:
    """Switch a snapshot taken with ``standalone=False`` to a rollback journal."""
    try:
        conn = sqlite3.connect(path)
        try:
            conn.execute(STANDALONE)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot finish the snapshot {path.name}: {exc}") from None


def checkpoint(path: Path) -> None:
    """Fold a database's WAL into the main file, so the file alone holds every commit (before it is moved)."""
    try:
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot checkpoint {path.name}: {exc}") from None
