"""The SQLite backend (``sqlite://`` URLs and plain paths), the only storage package that imports ``sqlite3``
and ``aiosqlite`` besides the turn spool: ``store.SQLiteStore`` (exported here) on one WAL connection
(``connection``, its lock ``turnfirst``), its named migration sets (``migrations``, with ``spares``,
``shortterm``, ``vector_schema``, ``followups``, ``kanban`` and ``usage`` registering their own), the
statements that write (``writes``, ``turn``, ``forgetting``, ``chatmove``), set-based decay and cleanup
(``decay``), the change journal (``journal``), vectors (``vectors``), and snapshot files read outside the
store (``snapshot``, reached from above only through ``storage.maintenance``). May import ``companion.core``
and the shared modules of ``companion.storage``, never ``postgres``; nothing above storage imports it
(``factory.open_store`` does)."""

from companion.storage.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
