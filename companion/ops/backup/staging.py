"""Where restore builds the new database, and the clean-up of one left by a restore that was killed.

A restore builds beside the live database (``.memory.sqlite3.restoring``) and renames it in at the end;
killed before that, it leaves the half-built file behind, as big as the database. Whoever takes the
database lock next (the bot at start, or the next restore) removes it: holding the lock, it knows no
restore is running.
"""

from __future__ import annotations

from pathlib import Path

SUFFIXES = ("", "-wal", "-shm", "-journal")


def staging_path(db_path: Path) -> Path:
    return db_path.with_name(f".{db_path.name}.restoring")


def remove_staging(db_path: Path) -> bool:
    """Remove the staging file and its side files; True when there was one. Call with the lock held."""
    staging = staging_path(db_path)
    found = False
    for suffix in SUFFIXES:
        path = Path(f"{staging}{suffix}")
        if path.exists():
            path.unlink()
            found = True
    return found
