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

# One trigger statement: the version of the scope and model of the ``row`` (OLD or NEW) goes up by one.
_BUMP = """INSERT INTO vector_versions (scope_key, model, version) VALUES ({row}.scope_key, {row}.model, 1)
        ON CONFLICT (scope_key, model) DO UPDATE SET version = version + 1;"""

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
    # A scope's vectors change only with its version, bumped by triggers in the writing transaction (every
    # path: the vector writer, forget, cleanup, another process): a reader keeps a scope's matrix in memory
    # and checks one row instead of reading every vector again (VectorStore.nearest).
    Migration("0002_vector_versions", """
    CREATE TABLE vector_versions (
        scope_key TEXT NOT NULL,
        model TEXT NOT NULL,
        version INTEGER NOT NULL,
        PRIMARY KEY (scope_key, model)
    ) WITHOUT ROWID;
    CREATE TRIGGER memory_vectors_added AFTER INSERT ON memory_vectors BEGIN {bump_new} END;
    CREATE TRIGGER memory_vectors_changed AFTER UPDATE ON memory_vectors BEGIN {bump_old} {bump_new} END;
    CREATE TRIGGER memory_vectors_removed AFTER DELETE ON memory_vectors BEGIN {bump_old} END
    """.format(bump_old=_BUMP.format(row="OLD"), bump_new=_BUMP.format(row="NEW"))),
))
register(VECTORS)
