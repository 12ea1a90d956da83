"""Storage: the store protocols by concern (``base``, with the typed settings and change-journal records of
``records`` and the optional ``capabilities``), one way to open a store (``factory.open_store(url)``),
SQLite's maintenance capability (``maintenance``) and the backends behind them (``SQLiteStore``: every
byte that reaches the database; ``InMemoryStore``; ``postgres.store.PostgresStore``, loaded only for a
``postgresql://`` URL). Layers above import only ``base``, ``factory`` and
``maintenance``. May import ``companion.core`` only."""
