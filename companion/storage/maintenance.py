"""SQLite's maintenance capability, the one part of the SQLite backend the operator tools may name: read a
snapshot file (``Maintenance.snapshot``) outside the store, make it standalone, fold a file's WAL in
before it is swapped. Backup and restore work on database files through it; a store reached through
``factory.open_store`` offers the live half (``MemoryStore.maintenance``)."""

from __future__ import annotations

from companion.storage.sqlite.snapshot import SnapshotReader, checkpoint, make_standalone, open_snapshot

__all__ = ["SnapshotReader", "checkpoint", "make_standalone", "open_snapshot"]
