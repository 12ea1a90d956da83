"""The operator commands of ``python bot.py`` that need nothing above the engine: backup, restore,
memories, decay, reindex, users, forget, export, stats, migrate. ``bot.py`` parses the command line and adds the
Telegram bot and the console. Heavy libraries are imported inside each command, so ``--help`` answers
at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TextIO

from companion.core.errors import ConfigError
from companion.ops.engine_assembly import admin_service, services

if TYPE_CHECKING:
    from tqdm import tqdm

    from companion.config.settings import Settings


def require_database(settings: Settings) -> None:
    """Commands that read or maintain the database never create one (an empty one would hide the mistake).
    A server database (PostgreSQL) is checked by connecting to it."""
    from companion.engine.maintenance_port import database_file

    if database_file(settings.database) is not None and not settings.db_path.is_file():
        raise ConfigError(f"no database at {settings.db_path}; check DATA_DIR (relative paths count from the "
                          "project folder)")


def counted(users: int, scopes: int) -> str:
    """Users and scopes as ``users`` counts them: a user has a private scope and one per group."""
    return f"{users} users in {scopes} scopes"


class ProgressLine:
    """The progress of a long operator command (backup, restore, migrate, reindex), one way for all: tqdm's bar
    on a terminal; in a pipe or a log (cron, systemd), a plain ``label: done/total`` line every 5%, never a
    carriage return. Used as a context manager: the bar is closed (or the last line written) on the way out,
    so an error printed after it starts a line of its own."""

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.bar: tqdm[Any] | None = None
        self.next = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.update(done - self.bar.n)
        elif done == total or done >= self.next:
            print(f"{self.label}: {done}/{total}", file=self.stream, flush=True)
            self.next = done + max(total // 20, 1)

    def __enter__(self) -> ProgressLine:
        if self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(desc=self.label, unit="memory", file=self.stream)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


async def run_backup(settings: Settings, args: argparse.Namespace) -> int:
    from companion.core.errors import BackupError
    from companion.core.timeutil import utcnow
    from companion.engine.maintenance_port import open_database
    from companion.ops.backup.stoppable import stoppable_backup

    require_database(settings)
    # Opening an empty file would make it an empty database: "0 users".
    if settings.db_path.is_file() and settings.db_path.stat().st_size == 0:
        raise BackupError(f"the database at {settings.db_path} is an empty file (0 bytes); nothing to back up")
    async with open_database(settings.database) as database:
        with ProgressLine("backup") as progress:
            result = await stoppable_backup(
                database, settings.backup_dir, utcnow(), settings.tz, settings.backup_keep_days, progress
            )
    scopes = counted(result.users, result.files + len(result.damaged))
    print(f"backup written to {result.folder}: {scopes}, {result.rows} memories")
    if result.damaged:
        print(f"error: {len(result.damaged)} scopes could not be read and are not in the CSV files "
              f"(the snapshot holds them as they are): {'; '.join(result.damaged)}", file=sys.stderr)
        return 1
    return 0


async def run_restore(settings: Settings, args: argparse.Namespace) -> int:
    from companion.core.timeutil import utcnow
    from companion.engine.maintenance_port import database_file
    from companion.ops.backup import dblock
    from companion.ops.backup.restore import restore

    if database_file(settings.database) is None:  # a server database: rebuilt elsewhere, then copied in
        from companion.core.errors import RestoreError
        from companion.ops.backup.migrate import restore_into

        replacing = args.replacing
        if replacing is None:
            raise RestoreError("name the database this restore replaces, so that what was forgotten after the backup "
                               "stays forgotten: --replacing OLD_DATABASE_URL (or --replacing none if none is left)")
        with ProgressLine("restore") as progress:
            result = await restore_into(settings.database, args.path, utcnow(), progress=progress, tz=settings.tz,
                                        replacing=None if replacing == "none" else replacing)
        print(f"restored {result.rows} memories and {result.tombstones} tombstones of "
              f"{counted(result.users, result.scopes)} into the database at DATABASE_URL (copied and verified)")
        if result.reforgotten:
            print(f"forgot {result.reforgotten} memories again: the replaced database had forgotten them after "
                  "this backup was made")
        return 0
    with dblock.hold(settings.db_path, "restore"), ProgressLine("restore") as progress:
        result = await restore(
            args.path, settings.db_path, utcnow(), force=args.force, progress=progress,
            keep=settings.restore_keep_copies, tz=settings.tz,
        )
    kept = f"; previous database kept at {result.kept_old}" if result.kept_old else ""
    print(f"restored {result.rows} memories and {result.tombstones} tombstones of "
          f"{counted(result.users, result.scopes)} into "
          f"{settings.db_path}{kept}")
    if result.reforgotten:
        print(f"forgot {result.reforgotten} memories again: they were forgotten after this backup was made")
    if result.cut:
        print(f"cut {result.cut} over-long cells to the length any input may have")
    if result.pruned:
        names = ", ".join(p.name for p in result.pruned)
        print(f"removed {len(result.pruned)} older before-restore copies (RESTORE_KEEP_COPIES="
              f"{settings.restore_keep_copies}): {names}")
    # A backup holds words, not vectors (they belong to one model): semantic recall needs them encoded again.
    encoded = await _reindex(settings, force=True) if settings.embedding_backend is not None else None
    if encoded is None:
        print("vectors: none re-encoded (semantic recall is off); recall uses keywords")
    else:
        print(f"vectors: re-encoded {encoded[0]} memories for semantic recall ({encoded[1]})")
    return 0


async def run_memories(settings: Settings, args: argparse.Namespace) -> int:
    from companion.core.models import Scope
    from companion.engine.maintenance_port import open_database
    from companion.ops.admin.table import memories_table

    require_database(settings)
    async with open_database(settings.database) as database:
        memories = await database.memories(Scope(args.user_id, args.chat))
        elsewhere = [(scope, len(await database.memories(scope))) for scope in await database.scopes()
                     if scope.user_id == args.user_id and scope.chat_id != args.chat]
    if memories:
        print(memories_table(memories, settings.tz))
        return 0
    where = "their private chat" if args.chat is None else f"chat {args.chat}"
    print(f"no memories for user {args.user_id} in {where}")
    others = [(scope, count) for scope, count in elsewhere if count]
    if others:
        # A user's group memories live in scopes of their own: name them, and how to list them.
        shown = ", ".join(f"{'private chat (no --chat)' if scope.chat_id is None else f'--chat {scope.chat_id}'}"
                          f" ({count} active)" for scope, count in others)
        print(f"they have active memories in {len(others)} other scopes: {shown}; list one with "
              f"`python bot.py memories {args.user_id} --chat CHAT_ID`")
    return 0


async def run_decay(settings: Settings, args: argparse.Namespace) -> int:
    from companion.ops.backup import dblock
    from companion.ops.jobs import scheduled

    require_database(settings)
    with dblock.hold(settings.db_path, "decay"):
        async with services(settings, need_llm=False) as parts:
            report = await scheduled.run_decay(parts.engine)
    print(f"decay done: {report.scopes} users, {report.decayed} memories decayed, {report.removed} removed")
    return 0


async def run_reindex(settings: Settings, args: argparse.Namespace) -> int:
    """Embed every memory that lacks a current vector (all with ``--force``), with a progress bar. A run cut
    short resumes where it stopped: what has a current vector is skipped."""
    if settings.embedding_backend is None:
        raise ConfigError("reindex needs semantic recall, which EMBEDDINGS=off turns off: unset it for the built-in "
                          "model, or set EMBEDDING_BASE_URL and EMBEDDING_MODEL (or EMBEDDING_LOCAL_MODEL)")
    require_database(settings)
    done = await _reindex(settings, force=args.force)
    if done is None:
        raise ConfigError("semantic recall could not start; see the log above")
    written, model, backend = done
    print(f"reindex done: {written} vectors written ({model}, scored by {backend})")
    return 0


async def _reindex(settings: Settings, *, force: bool) -> tuple[int, str, str] | None:
    """(vectors written, model, scorer); None when semantic recall is off or could not start."""
    from companion.ops.backup import dblock

    with dblock.hold(settings.db_path, "reindex"):
        async with services(settings, need_llm=False) as parts:
            dense = parts.engine.dense
            if dense is None:
                return None
            with ProgressLine(f"reindex ({dense.model})") as progress:
                written = await dense.reindex(force=force, progress=progress)
    return written, dense.model, dense.vectors.backend


async def run_users(settings: Settings, args: argparse.Namespace) -> int:
    from companion.ops.admin import admin_cli

    require_database(settings)
    async with services(settings, need_llm=False) as parts:
        print(await admin_cli.users(admin_service(settings, parts), settings.tz))
    return 0


async def run_forget(settings: Settings, args: argparse.Namespace) -> int:
    from companion.ops.admin import admin_cli
    from companion.ops.backup import dblock

    require_database(settings)
    with dblock.hold(settings.db_path, "forget"):
        async with services(settings, need_llm=False) as parts:
            print(await admin_cli.forget(admin_service(settings, parts), args.user_id,
                                         None if args.all else args.handle))
    return 0


async def run_export(settings: Settings, args: argparse.Namespace) -> int:
    from companion.core.timeutil import utcnow
    from companion.ops.admin import admin_cli

    require_database(settings)
    out = args.out or settings.backup_dir / f"export_{utcnow().astimezone(settings.tz):%Y%m%d_%H%M%S}.csv"
    async with services(settings, need_llm=False) as parts:
        print(await admin_cli.export(admin_service(settings, parts), out, args.user, args.keyword))
    return 0


async def run_stats(settings: Settings, args: argparse.Namespace) -> int:
    from companion.ops.admin import admin_cli

    require_database(settings)
    async with services(settings, need_llm=False) as parts:
        print(await admin_cli.stats(admin_service(settings, parts)))
    return 0


Command = Callable[["Settings", argparse.Namespace], Coroutine[Any, Any, int]]
async def run_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Copy the database at ``--from`` (default: this installation's) into ``--to``, then verify."""
    import contextlib

    from companion.core.timeutil import utcnow
    from companion.engine.maintenance_port import database_file, open_database
    from companion.ops.backup import dblock

    source_url = args.source or settings.database
    if source_url == args.to:
        raise ConfigError("migrate --to names the database it would copy from; give another one")
    source_file = database_file(source_url)
    if source_file is not None and not source_file.is_file():
        raise ConfigError(f"no database at {source_file} to copy from")
    with contextlib.ExitStack() as held:
        for url in (source_url, args.to):  # neither SQLite file may be written by anyone else meanwhile
            path = database_file(url)
            if path is not None:
                held.enter_context(dblock.hold(path, "migrate"))
        async with open_database(source_url) as source, open_database(args.to, copying=True) as target:
            with ProgressLine("migrate") as progress:
                copied = await source.copy_into(target, utcnow(), progress)
    print(f"copied {copied.memories} memories (tombstones included), {copied.turns} queued turns, {copied.short} "
          f"short-term items, {copied.profiles} profiles, {copied.meta} settings, {copied.usage} usage rows and "
          f"{copied.moves} unfinished chat moves of {copied.scopes} new scopes; verified {copied.verified_scopes} "
          "scopes: counts and checksums equal")
    return 0


OPERATOR_COMMANDS: dict[str, Command] = {
    "migrate": run_migrate, "backup": run_backup, "restore": run_restore, "memories": run_memories, "decay": run_decay,
    "users": run_users, "forget": run_forget, "export": run_export, "stats": run_stats, "reindex": run_reindex,
}
