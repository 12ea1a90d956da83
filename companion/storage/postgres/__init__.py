"""The PostgreSQL backend (``postgresql://`` and ``postgres://`` URLs): ``store.PostgresStore`` on an asyncpg
pool (``pool``), its schema and named migrations (``schema``), row mapping (``rows``), the statements that
write (``writes``), set-based decay and cleanup (``decay``), vectors and the usage log (``extras``). Loaded
only when such a URL is opened, so asyncpg stays optional. May import ``companion.core`` and the rest of
``companion.storage``; nothing above storage imports it (``factory.open_store`` does)."""
