"""Storage: the store protocols by concern (``base``, with the follow-up and journal policy of ``records`` and
the optional ``capabilities``; the typed settings, journal entries and ``TurnView`` they carry are data of
``companion.core``), one way to open a store (``factory.open_store(url)``),
SQLite's maintenance capability (``maintenance``) and the backends behind them, one package each: ``sqlite``
(``SQLiteStore``), ``postgres`` (``PostgresStore``, loaded only for a ``postgresql://`` URL) and
``inmemory``. At this top level only what more than one backend uses, none of it importing a database
driver but the turn spool (``spool``, a local SQLite file whatever the database): row codecs (``rows``),
turn records (``turns``), cell SQL per dialect (``cellsql``), migration sets (``migration_sets``) and vector
packing and scoring (``vectormath``). Only this package imports ``sqlite3``, ``aiosqlite`` or ``asyncpg``;
``postgres`` imports nothing of ``sqlite``. Layers above import only ``base``, ``factory`` and
``maintenance``. May import ``companion.core`` only."""
