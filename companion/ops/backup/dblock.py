"""One process at a time writes the database: the bot, the console, restore and offline maintenance.

The lock is ``fcntl.flock`` on a file beside the database (``memory.sqlite3.lock``), so the operating
system releases it when the holder dies, even by ``kill -9``: a crash never leaves a stale lock behind.
The holder writes its role and pid into the file so whoever is refused can say who holds it. The file is
never deleted: unlinking a lock file while another process opens it would let two holders in at once.
Read-only commands (``memories``, ``backup`` through SQLite's own locking) take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from companion.core.errors import CompanionError, ConfigError

LOCK_SUFFIX = ".lock"


class DatabaseInUseError(CompanionError):
    """Another process holds the database lock."""


def lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + LOCK_SUFFIX)


def holder(db_path: Path) -> str:
    """Who holds (or last held) the lock, as "<role> (pid N)"; empty when nobody ever wrote the file."""
    try:
        role, _, pid = lock_path(db_path).read_text(encoding="utf-8").strip().rpartition(" ")
    except OSError:
        return ""
    return f"{role} (pid {pid})" if pid else role


@contextlib.contextmanager
def hold(db_path: Path, role: str) -> Iterator[None]:
    """Hold the database for ``role`` ("bot", "restore", ...); raise DatabaseInUseError at once if taken."""
    path = lock_path(db_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # DATA_DIR or a sqlite DATABASE_URL naming a place no database can be
        raise ConfigError(f"the database folder {path.parent} cannot be used: {exc.strerror or exc} "
                          "(DATA_DIR, DATABASE_URL)") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = holder(db_path) or "another process"
            raise DatabaseInUseError(
                f"the database {db_path} is in use by {who}; wait for it to finish or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{role} {os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
