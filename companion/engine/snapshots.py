"""Snapshot files of a SQLite database, read outside any store: the nightly backup exports its CSV files from
one, restore checks one and reads the tombstones of the file it replaces, and folds a file's WAL in before
it is swapped. The operator tools reach SQLite's reader (``storage.maintenance``) through here only."""

from __future__ import annotations

from companion.storage.maintenance import SnapshotReader, checkpoint, make_standalone, open_snapshot

__all__ = ["SnapshotReader", "checkpoint", "make_standalone", "open_snapshot"]
