"""The schema of the semantic-recall vectors (owner ``vectors``), registered with the database-wide
migration sets at import (``sqlite.py`` imports this module, so every store has the table, empty unless a
backend is configured). Append steps; never edit a shipped one.

A plain table of float32 BLOBs keyed by the memory handle (unique across the database): it needs no
SQLite extension to create, back up, restore or delete, so a database with vectors opens anywhere.
sqlite-vec, where it loads, only scores the BLOBs (``vec_distance_cosine``).
"""

from __future__ import annotations

from companion.storage.migration_sets import Migration, MigrationSet
from companion.storage.sqlite.migrations import register

VECTORS = MigrationSet("vectors", (
    Migration("0001_memory_vectors", """
    CREATE TABLE memory_vectors (
        handle INTEGER PRIMARY KEY,
        scope_key TEXT NOT NULL,
        model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        text_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX memory_vectors_scope ON memory_vectors (scope_key, model)
    """),
))
register(VECTORS)
