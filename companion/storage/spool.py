"""Turns the database could not take, kept in a small local SQLite file until it can.

The chat layer queues every answered turn for learning in the turn's one write. When the database cannot
take it (PostgreSQL unreachable past its reconnect window, a SQLite database that is locked or full), the
turn waits in the conversation's session and goes with the next write that succeeds. That wait was in the
process's memory only: a stop or a crash during a long outage lost what the user had said. The spool is
the same wait on disk, beside the process (``DATA_DIR/spool/``), whatever database the bot uses; each
scope's row set mirrors its session's waiting turns (replaced as a whole, dropped once they are queued).

Every process writes a file of its own, created on its first failure and held under an ``flock`` for the
process's life (several workers may share ``DATA_DIR``); a file whose lock can be taken belongs to a
process that stopped or died, and any process replays and removes it (``Spools.orphans``).

It holds what users said, so it is kept as the database is: forgetting takes matching turns out of it
(the chat layer mirrors its session after each forget), and the operator's ``forget USER`` empties the
user's rows. A spool on the same full disk as a SQLite database fails too: then the turns wait in memory,
as before. Turns the database refuses outright go to a shared set-aside file (``Spools.set_aside``), which
no replay reads. Plain ``sqlite3`` in a worker thread: it is written only when the database fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from companion.core.errors import StorageError
from companion.core.models import Scope, Turn
from companion.core.spools import SpooledTurns
from companion.core.timeutil import from_db, to_db

SPOOL_DIR = "spool"
SET_ASIDE = "turns-set-aside.sqlite3"  # named like the others so forgetting and ``forget USER`` reach it
SCHEMA = """
CREATE TABLE IF NOT EXISTS spooled_turns (
    scope_key TEXT NOT NULL,
    position INTEGER NOT NULL,
    turn TEXT NOT NULL,
    PRIMARY KEY (scope_key, position)
)
"""

T = TypeVar("T")


class SpoolError(StorageError):
    """The spool file cannot be read or written (a full disk, a damaged file)."""


class TurnSpool:
    """Per scope, the turns still to be queued for learning, oldest first."""

    def __init__(self, path: Path, *, create: bool = True) -> None:
        self.path = path
        self._create = create  # False: an orphan, which must exist (a replay never makes an empty one)

    async def keep(self, scope: Scope, turns: Sequence[Turn]) -> None:
        """The scope's waiting turns are now exactly ``turns`` (none: the scope's rows go)."""
        rows = [(scope.key, i, _dump(t)) for i, t in enumerate(turns)]

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("DELETE FROM spooled_turns WHERE scope_key = ?", (scope.key,))
                conn.executemany("INSERT INTO spooled_turns (scope_key, position, turn) VALUES (?, ?, ?)", rows)

        await self._run(write)

    async def add(self, scope: Scope, turns: Sequence[Turn]) -> None:
        """``turns`` after the scope's waiting ones, in one transaction (several processes may add)."""

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                last = conn.execute("SELECT COALESCE(MAX(position), -1) FROM spooled_turns WHERE scope_key = ?",
                                    (scope.key,)).fetchone()[0]
                conn.executemany("INSERT INTO spooled_turns (scope_key, position, turn) VALUES (?, ?, ?)",
                                 [(scope.key, last + 1 + i, _dump(t)) for i, t in enumerate(turns)])

        await self._run(write)

    async def load(self, scope: Scope) -> list[Turn]:
        def read(conn: sqlite3.Connection) -> list[str]:
            found = conn.execute("SELECT turn FROM spooled_turns WHERE scope_key = ? ORDER BY position",
                                 (scope.key,)).fetchall()
            return [str(row[0]) for row in found]

        return [turn for raw in await self._run(read) if (turn := _load(raw)) is not None]

    async def scopes(self) -> list[Scope]:
        """The scopes with turns waiting; nothing (and no file made) when the spool was never written."""
        if not self.path.exists():
            return []

        def read(conn: sqlite3.Connection) -> list[str]:
            return [str(row[0]) for row in conn.execute("SELECT DISTINCT scope_key FROM spooled_turns ORDER BY 1")]

        return [Scope.from_key(key) for key in await self._run(read)]

    async def drop_user(self, user_id: int) -> int:
        """Every waiting turn of ``user_id``, in private and in groups (the operator's ``forget USER``)."""
        if not self.path.exists():
            return 0
        keys = [s.key for s in await self.scopes() if s.user_id == user_id]

        def delete(conn: sqlite3.Connection) -> int:
            with conn:
                return sum(conn.execute("DELETE FROM spooled_turns WHERE scope_key = ?", (k,)).rowcount for k in keys)

        return await self._run(delete)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._blocking, work)

    def _blocking(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            if self._create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(self.path, timeout=5.0)
            else:
                conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=rw", uri=True, timeout=5.0)
        except (OSError, sqlite3.Error) as exc:
            raise SpoolError(f"the turn spool {self.path} cannot be opened: {exc}") from exc
        try:
            conn.execute(SCHEMA)
            return work(conn)
        except sqlite3.Error as exc:
            raise SpoolError(f"the turn spool {self.path} cannot be used: {exc}") from exc
        finally:
            conn.close()


class Spools:
    """The spool files under ``directory``: this process's own and those of processes gone."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._own: TurnSpool | None = None
        self._lock: int | None = None

    def own(self) -> TurnSpool:
        """This process's file, made and locked on first use."""
        if self._own is None:
            try:
                self._own = self._make()
            except OSError as exc:
                raise SpoolError(f"no turn spool can be made in {self.directory}: {exc}") from exc
        return self._own

    def _make(self) -> TurnSpool:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"turns-{os.getpid()}-{secrets.token_hex(4)}"
        # Locked under a name no replay looks at, then renamed: the lock file never shows unlocked.
        making = self.directory / f".{name}.lock"
        fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(making, self.directory / f"{name}.lock")
        self._lock = fd
        return TurnSpool(self.directory / f"{name}.sqlite3")

    @contextlib.contextmanager
    def orphans(self) -> Iterator[list[SpooledTurns]]:
        """The files of processes gone, each locked while the caller replays them; the caller removes each
        it emptied (``remove``) before the locks are released."""
        held: list[tuple[int, TurnSpool]] = []
        try:
            for lock in sorted(self.directory.glob("turns-*.lock")) if self.directory.is_dir() else []:
                if self._own is not None and lock.stem == self._own.path.stem:
                    continue
                try:
                    fd = os.open(lock, os.O_RDWR)
                except FileNotFoundError:  # removed by another process's replay meanwhile
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its process is alive
                    os.close(fd)
                    continue
                held.append((fd, TurnSpool(lock.with_suffix(".sqlite3"), create=False)))
            yield [spool for _, spool in held]
        finally:
            for fd, _ in held:
                os.close(fd)

    def remove(self, spool: SpooledTurns) -> None:
        """An emptied orphan goes (its lock file first unlinked while still held, so nobody takes it after)."""
        assert isinstance(spool, TurnSpool)
        with contextlib.suppress(FileNotFoundError):
            spool.path.with_suffix(".lock").unlink()
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{spool.path}{suffix}").unlink()

    async def set_aside(self, scope: Scope, turns: Sequence[Turn]) -> None:
        """Turns the database refuses (``RefusedDataError``) go to one shared file that no replay reads (it
        has no lock file), where forgetting still reaches them and an operator can look."""
        await TurnSpool(self.directory / SET_ASIDE).add(scope, turns)

    async def drop_user(self, user_id: int) -> int:
        """Every spooled turn of ``user_id`` in every file, live or not (the operator's ``forget USER``)."""
        return sum([await spool.drop_user(user_id) for spool in self._files()])

    async def scrub(self, scope: Scope, keep: Callable[[Turn], bool]) -> None:
        """In every file, live or not, the scope's turns are only those ``keep`` keeps (a forget: another
        worker may have spooled the scope's turns before the scope came to this one)."""
        for spool in self._files():
            turns = await spool.load(scope)
            kept = [t for t in turns if keep(t)]
            if len(kept) != len(turns):
                await spool.keep(scope, kept)

    def _files(self) -> list[TurnSpool]:
        files = sorted(self.directory.glob("turns-*.sqlite3")) if self.directory.is_dir() else []
        return [TurnSpool(p, create=False) for p in files]

    def close(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def _dump(turn: Turn) -> str:
    return json.dumps({"user": turn.user, "reply": turn.reply, "at": to_db(turn.at), "chat": turn.chat_id,
                       "message": turn.message_id, "key": turn.key}, ensure_ascii=False, separators=(",", ":"))


def _load(raw: str) -> Turn | None:
    """A spooled turn; None for a row this version cannot read (it is dropped with the scope's others)."""
    try:
        found = json.loads(raw)
        at: datetime = from_db(str(found["at"]))
        reply = found["reply"]
        return Turn(user=str(found["user"]), reply=None if reply is None else str(reply), at=at,
                    chat_id=_opt_int(found.get("chat")), message_id=_opt_int(found.get("message")),
                    key=None if found.get("key") is None else str(found["key"]))
    except (ValueError, TypeError, KeyError):
        return None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
