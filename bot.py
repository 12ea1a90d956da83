"""Composition root and command line.

    python bot.py                 run the Telegram bot (default)
    python bot.py worker          handle updates from the shared queue (REDIS_URL; docs/operator.md, "Workers")
    python bot.py console         chat in the terminal as one local user
    python bot.py backup          write today's backup now
    python bot.py restore PATH    rebuild the database from a backup folder or snapshot [--force]
    python bot.py memories USER   print a user's memories as a table
    python bot.py decay           run decay and cleanup now
    python bot.py reindex         embed memories for semantic recall (when a backend is configured)
    python bot.py users           list every user with memory counts
    python bot.py forget USER_ID (--all | HANDLE)   forget one memory of a user, or all of them
    python bot.py export [--user ID] [--keyword W] [--out PATH]   memories as an Excel-readable CSV
    python bot.py stats           memories and LLM usage (last 7 days, per day and purpose)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only what every command needs is imported here; aiogram, openai, jieba and pandas take seconds to
# import, so each command imports its own parts inside its function (``--help`` answers at once).
from companion.core.errors import CompanionError, ConfigError
from companion.ops.backup.dblock import DatabaseInUseError
from companion.ops.engine_assembly import Services, admin_service, services
from companion.ops.jobs.leader import ALONE
from companion.ops.operator_commands import OPERATOR_COMMANDS, Command
from companion.ops.preflight import StartupError, preflight

if TYPE_CHECKING:
    from aiogram import Bot, Dispatcher
    from aiohttp import web

    from companion.chat.buffer import MessageBuffer
    from companion.chat.pipeline import ChatService
    from companion.config.settings import Settings
    from companion.core.models import Scope
    from companion.ops.workers.processes import Shared
    from handlers.queue import Consumer
    from handlers.webhook import Routes

log = logging.getLogger("bot")

# Relative paths in .env and the environment are resolved against this folder, and .env is read from
# it, so the bot finds the same database whatever folder it is started from (docs/operator.md, "Configuration").
PROJECT_DIR = Path(__file__).resolve().parent


@asynccontextmanager
async def companion(settings: Settings) -> AsyncIterator[tuple[ChatService, Services]]:
    from companion.chat.pipeline import ChatService
    from companion.chat.stopping import wind_down
    from companion.chat.types import ChatConfig

    async with services(settings, need_llm=True) as parts:
        assert parts.llm is not None
        chat: ChatService

        async def forget(scope: Scope, handles: Iterable[int]) -> int:
            return await chat.forget(scope, handles)  # the tool's forgetting also leaves the short-term context

        # Tools are built per reply for the turn's scope; LLM_TOOLS_ENABLED=false leaves the plain call.
        chat = ChatService(parts.engine, parts.llm, ChatConfig.from_settings(settings),
                           tools=parts.engine.tools(forget=forget), spools=parts.spools)
        await chat.load()
        try:
            yield chat, parts
        finally:
            await wind_down(chat, None, (), settings.stop_timeout_seconds)


def build_bot(settings: Settings, chat: ChatService, parts: Services) -> tuple[Bot, Dispatcher, MessageBuffer]:
    """The Telegram side: client, dispatcher with the routers, and the per-user message buffer."""
    from companion.chat.buffer import MessageBuffer
    from companion.chat.group import GroupSettings
    from handlers import build_client, build_dispatcher

    assert settings.telegram_bot_token is not None
    buffer = MessageBuffer(settings.quiet_seconds)
    bot = build_client(settings.telegram_bot_token.get_secret_value(), settings.telegram_api_base)
    dispatcher = build_dispatcher(chat, buffer, settings, GroupSettings(parts.engine),
                                  admin_service(settings, parts, chat.forget))
    return bot, dispatcher, buffer


async def run_bot(settings: Settings, args: argparse.Namespace) -> int:
    # Every start-up problem (a missing, malformed or rejected token or key, no route) is found before
    # aiogram and the chat's libraries are imported: they cost seconds of CPU, the checks a fraction of one.
    settings.require_for_chat(telegram=True)
    settings.require_for_workers(worker=False)
    from companion.ops.backup import dblock  # fcntl only: a database in use is refused before Telegram is asked

    # SQLite is one process's file; a server database is shared by every worker and needs no file lock.
    with contextlib.nullcontext() if settings.shared_database else dblock.hold(settings.db_path, "the bot"):
        await preflight(settings, telegram=True)
        if settings.workers == 1:
            return await serve(settings)
        from companion.ops.workers.processes import worker_command, worker_processes

        async with worker_processes(settings.workers - 1, worker_command(Path(__file__).resolve()), PROJECT_DIR,
                                    settings.stop_timeout_seconds):
            return await serve(settings)


async def run_worker(settings: Settings, args: argparse.Namespace) -> int:
    settings.require_for_chat(telegram=True)
    settings.require_for_workers(worker=True)
    await preflight(settings, telegram=True)
    return await serve(settings, receiving=False)


async def serve(settings: Settings, *, receiving: bool = True) -> int:
    """The bot itself, once the checks passed; the caller holds the database lock (SQLite). ``receiving``:
    this process takes updates from Telegram (a ``worker`` only handles what the queue gives it)."""
    from companion.chat.followup_round import FollowUpRound
    from companion.chat.stopping import wind_down
    from companion.config.runtime import settle_heap
    from companion.ops.backup.staging import remove_staging
    from companion.ops.jobs import proactive, scheduled
    from companion.ops.jobs.upgrade import upgrade_tables
    from handlers.admin import register_admin_commands
    from handlers.board import start_board
    from handlers.commands import bot_commands
    from handlers.delivery import switch_off_blocked
    from handlers.dida import start_kanban
    from handlers.groups import resume_moves, set_menus
    from handlers.reviews import followup_sender, proactive_senders
    from handlers.webhook import receive

    if remove_staging(settings.db_path):
        log.info("removed the half-built database of a restore that was killed")
    async with companion(settings) as (chat, parts), queue_parts(settings) as shared:
        bot, dispatcher, buffer = build_bot(settings, chat, parts)
        leader = shared.leader if shared is not None else ALONE
        scheduler = scheduled.build_scheduler(parts.engine, parts.maintenance, settings, leader)

        async def blocked(scope: Scope) -> None:
            await switch_off_blocked(chat, buffer, scope)

        proactive.schedule(scheduler, parts.engine, settings.tz, settings.review_hours,
                           *proactive_senders(bot, blocked), leader=leader)
        if settings.followups:
            followup_round = FollowUpRound(chat, settings.followup_hours)
            send_followup = followup_sender(bot, blocked)
            proactive.schedule_followups(scheduler, lambda now: followup_round(now, send_followup),
                                         settings.followup_check_minutes, leader)
        scheduled.schedule_spool_replay(scheduler, chat.replay_spools)
        background: list[asyncio.Task[Any]] = []
        upgrading: asyncio.Task[int] | None = None
        kanban = None
        board_server: web.AppRunner | None = None
        consumer: Consumer | None = None
        try:
            await parts.engine.ready()  # the dictionaries, loading since the engine opened
            settle_heap()  # what start-up built stays out of the garbage collector's way
            if receiving:  # one process polls the kanbans and serves the OAuth callback, never every worker
                kanban = await start_kanban(settings, chat, bot, dispatcher)  # None unless DIDA_* set
            # The memory board (WEBAPP_URL): served where updates are received, on the webhook's server or its own.
            board = await start_board(settings, bot, chat, dispatcher["rooms"]) if receiving else None
            if board is not None and not settings.webhook_url:
                board_server = await board.listen(settings.webhook_listen, settings.webapp_port)
            routes = board.install if board is not None else None
            # Before polling: a group move a crash cut short is finished (its marker says so), so the
            # new supergroup's first message finds its members under the new id.
            groups = dispatcher["groups"]
            await scheduled.led(leader, "unfinished group moves", lambda: resume_moves(chat.engine, chat, groups))
            if receiving:
                await set_menus(bot, bot_commands())
                await register_admin_commands(bot, settings.admin_ids)
            scheduler.start()
            # Decay and a missed backup run beside polling: users are answered while they run.
            catching_up = scheduled.catch_up(parts.engine, parts.maintenance, settings, leader)
            background.append(asyncio.create_task(catching_up))
            # Memory tables left at an old version are upgraded in small batches, never at start-up.
            upgrading = asyncio.create_task(upgrade_tables(parts.maintenance), name="upgrade-tables")
            background.append(upgrading)
            if shared is None:
                await receive(dispatcher, bot, settings, routes=routes)
            else:
                from handlers.queue import Consumer

                consumer = Consumer(dispatcher, bot, buffer, shared.worker)
                await consume(consumer, shared, dispatcher, bot, settings, receiving=receiving, routes=routes)
        finally:
            if board_server is not None:
                await board_server.cleanup()
            if upgrading is not None:
                upgrading.cancel()  # the table upgrade resumes at the next start
            if kanban is not None:
                await kanban.stop()  # nothing is lost: unsent changes wait in the journal
            if scheduler.running:  # a start-up failure comes before the scheduler started
                scheduler.shutdown(wait=False)
            # Within STOP_TIMEOUT_SECONDS: replies and extractions in flight finish or are abandoned
            # with their turns still queued (companion.chat.stopping); queued updates are acknowledged
            # as they finish, the abandoned ones are read again by the next worker of their shard.
            handling = list(consumer.handling) if consumer is not None else []
            await wind_down(chat, buffer, [*background, *handling], settings.stop_timeout_seconds)
            if consumer is not None:
                await consumer.leave()
            await bot.session.close()
    log.info("bot stopped")
    return 0


@asynccontextmanager
async def queue_parts(settings: Settings) -> AsyncIterator[Shared | None]:
    """With REDIS_URL: the queue, this process's shard leases and the scheduled jobs' lead; else nothing."""
    if not settings.redis_url:
        yield None
        return
    from companion.ops.workers.processes import shared

    async with shared(settings) as parts:
        yield parts


async def consume(consumer: Consumer, shared: Shared, dispatcher: Dispatcher, bot: Bot, settings: Settings, *,
                  receiving: bool, routes: Routes | None = None) -> None:
    """Handle the queue's updates until told to stop; the receiving process also takes them from Telegram."""
    from handlers.queue import intake
    from handlers.webhook import receive, stop_signal

    stop = asyncio.Event()
    consuming = asyncio.create_task(consumer.run(stop), name="consume-updates")
    try:
        if receiving:
            # Polling waits for a queue that is down; a webhook answers an error and Telegram sends again.
            await receive(intake(shared.queue, wait=not settings.webhook_url), bot, settings, queued_for=dispatcher,
                          routes=routes)
        else:
            log.info("worker started; handling the queue's updates")
            await stop_signal().wait()
    finally:
        stop.set()
        await consuming


async def run_console_mode(settings: Settings, args: argparse.Namespace) -> int:
    settings.require_for_chat(telegram=False)  # no Telegram token: the console talks to the model only
    from companion.ops.backup import dblock

    with dblock.hold(settings.db_path, "the console"), ExitStack() as logs:
        await preflight(settings, telegram=False)
        from companion.core.models import Scope
        from companion.hosts.console import is_terminal, run_console

        if is_terminal():
            # Log lines printed to the terminal would land inside the line being typed.
            log_file = settings.data_dir / "console.log"
            logs.enter_context(logs_to_file(log_file))
            print(f"（日志写在 {log_file}）")
        from companion.chat.followup_round import FollowUpRound

        async with companion(settings) as (chat, _):
            followup = FollowUpRound(chat, settings.followup_hours, enabled=settings.followups)
            await run_console(chat, Scope(settings.console_user_id), followup=followup)
    return 0


@contextmanager
def logs_to_file(path: Path) -> Iterator[None]:
    """Send every log record to ``path`` instead of the console's handlers while the block runs."""
    root = logging.getLogger()
    saved = list(root.handlers)
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    if saved:
        handler.setFormatter(saved[0].formatter)
    root.handlers = [handler]
    try:
        yield
    finally:
        root.handlers = saved
        handler.close()


COMMANDS: dict[str, Command] = {"run": run_bot, "worker": run_worker, "console": run_console_mode,
                                **OPERATOR_COMMANDS}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bot.py", description="Companion bot with long-term memory.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Telegram bot (default)")
    sub.add_parser("worker", help="handle the queue's updates beside the bot (REDIS_URL, a shared database)")
    sub.add_parser("console", help="chat in the terminal as one local user")
    sub.add_parser("backup", help="write today's backup now")
    restore_p = sub.add_parser("restore", help="rebuild the database from a backup folder or snapshot")
    restore_p.add_argument("path", type=Path)
    restore_p.add_argument("--force", action="store_true", help="replace a database that holds memories")
    restore_p.add_argument("--replacing", metavar="URL", default=None,
                           help="PostgreSQL: the database this restore replaces (its forgets are kept), or none")
    mem_p = sub.add_parser("memories", help="print a user's memories")
    mem_p.add_argument("user_id", type=int)
    mem_p.add_argument("--chat", type=int, default=None, help="group chat id, for a group scope")
    sub.add_parser("decay", help="run decay and cleanup now")
    reindex_p = sub.add_parser("reindex", help="embed memories for semantic recall")
    reindex_p.add_argument("--force", action="store_true", help="embed every memory again, not only missing ones")
    sub.add_parser("users", help="list every user with memory counts")
    forget_p = sub.add_parser("forget", help="forget one memory of a user (HANDLE), or all of them (--all)")
    forget_p.add_argument("user_id", type=int)
    which = forget_p.add_mutually_exclusive_group(required=True)
    which.add_argument("handle", type=int, nargs="?")
    which.add_argument("--all", action="store_true", help="every memory of the user, in every chat")
    export_p = sub.add_parser("export", help="memories as an Excel-readable CSV")
    export_p.add_argument("--user", type=int, default=None, help="only this user")
    export_p.add_argument("--keyword", default=None, help="only memories containing this word")
    export_p.add_argument("--out", type=Path, default=None, help="file to write (default: in the backup folder)")
    sub.add_parser("stats", help="memories and LLM usage of the last 7 days")
    migrate_p = sub.add_parser("migrate", help="copy the database into another one (SQLite <-> PostgreSQL) and verify")
    migrate_p.add_argument("--to", required=True, help="the database URL to copy into (postgresql://..., sqlite:///...)")
    migrate_p.add_argument("--from", dest="source", default=None,
                           help="the database URL to copy from (default: DATABASE_URL, or this installation's SQLite)")
    args = parser.parse_args(argv)
    args.command = args.command or "run"
    return args


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stopped_while_importing(exc: ImportError) -> bool:
    """A SIGTERM that lands while a library loads (numpy, under pandas) reaches us as that library's ImportError
    with our KeyboardInterrupt inside: a stop, not a missing package."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # --help exits here, before pydantic is imported
    from companion.config import runtime
    from companion.config.logs import setup_logging
    from companion.config.settings import load_settings

    # SIGTERM stops a command like Ctrl-C does, so its cleanup runs (the bot itself installs aiogram's own
    # handlers over this one while it polls).
    signal.signal(signal.SIGTERM, _terminated)
    try:
        settings = load_settings(PROJECT_DIR)
        setup_logging(settings.log_level)
        return runtime.run(COMMANDS[args.command](settings, args), settings.event_loop)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except (StartupError, DatabaseInUseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CompanionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except ImportError as exc:
        if _stopped_while_importing(exc):
            return 130
        raise


def exit_now(code: int) -> None:
    """Leave without tearing the interpreter down. Everything is closed by now (database, sessions, log
    files); the teardown itself (freeing every module and cache: jieba's dictionary, pandas, aiogram's
    types) took 4-6 s on a busy machine, and a stop (SIGTERM) must not wait for it. One collection still
    runs, so an object left unclosed says so ("Unclosed client session") as it would at a normal exit."""
    gc.collect()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
