"""SQLiteStore: every byte that reaches the database. May import ``companion.core`` only."""
