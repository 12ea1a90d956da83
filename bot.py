"""Composition root and command line.

    python bot.py                 run the Telegram bot (default)
    python bot.py console         chat in the terminal as one local user
    python bot.py backup          write today's backup now
    python bot.py restore PATH    rebuild the database from a backup folder or snapshot [--force]
    python bot.py memories USER   print a user's memories as a table
    python bot.py decay           run decay and cleanup now
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from companion.chat.buffer import MessageBuffer
from companion.chat.group import GroupSettings, Rooms
from companion.chat.pipeline import ChatConfig, ChatService
from companion.config.logs import setup_logging
from companion.config.settings import Settings, load_settings
from companion.console import run_console
from companion.core.errors import CompanionError, ConfigError
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from companion.llm.client import LLMClient
from companion.ops import jobs, reviews
from companion.ops.backup import make_backup
from companion.ops.restore import restore
from companion.ops.table import memories_table
from companion.ops.upgrade import upgrade_tables
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore
from handlers import build_router
from handlers.commands import bot_commands
from handlers.groups import set_menus
from handlers.memories import proactive_senders
from memory import MemoryEngine

log = logging.getLogger("bot")


def build_llm(settings: Settings) -> LLMClient:
    settings.require("llm_api_key")
    assert settings.llm_api_key is not None
    return LLMClient(
        api_key=settings.llm_api_key.get_secret_value(), base_url=settings.llm_base_url,
        model=settings.llm_model, timeout=settings.llm_timeout_seconds, max_retries=settings.llm_max_retries,
    )


@dataclass(frozen=True, slots=True)
class Services:
    store: SQLiteStore
    engine: MemoryEngine
    llm: LLMClient | None


@asynccontextmanager
async def services(settings: Settings, *, need_llm: bool) -> AsyncIterator[Services]:
    """The store, the engine on it and, when needed or configured, the LLM client; closed in reverse order."""
    llm = build_llm(settings) if need_llm or settings.llm_api_key is not None else None
    try:
        store = await SQLiteStore.open(settings.db_path)
        try:
            engine = await MemoryEngine.create(store, settings, KeywordExtractor(), llm)
            yield Services(store, engine, llm)
        finally:
            await store.close()
    finally:
        if llm is not None:
            await llm.close()


@asynccontextmanager
async def companion(settings: Settings) -> AsyncIterator[tuple[ChatService, Services]]:
    async with services(settings, need_llm=True) as parts:
        assert parts.llm is not None
        chat = ChatService(parts.engine, parts.llm, ChatConfig.from_settings(settings))
        await chat.load()
        try:
            yield chat, parts
        finally:
            await chat.drain()


def build_bot(settings: Settings, chat: ChatService, store: SQLiteStore) -> tuple[Bot, Dispatcher, MessageBuffer]:
    """The Telegram side: client, dispatcher with the routers, and the per-user message buffer."""
    assert settings.telegram_bot_token is not None
    buffer = MessageBuffer(settings.quiet_seconds)
    session = AiohttpSession(api=TelegramAPIServer.from_base(settings.telegram_api_base))
    bot = Bot(settings.telegram_bot_token.get_secret_value(), session=session)
    dispatcher = Dispatcher(chat=chat, buffer=buffer, settings=settings, engine=chat.engine, tz=settings.tz,
                            groups=GroupSettings(store), rooms=Rooms())
    dispatcher.include_router(build_router())
    return bot, dispatcher, buffer


async def run_bot(settings: Settings, args: argparse.Namespace) -> int:
    settings.require("telegram_bot_token", "llm_api_key")
    async with companion(settings) as (chat, parts):
        bot, dispatcher, buffer = build_bot(settings, chat, parts.store)
        scheduler = jobs.build_scheduler(parts.engine, parts.store, settings)
        reviews.schedule(scheduler, parts.engine, settings.tz, settings.review_hours, *proactive_senders(bot))
        upgrading = asyncio.create_task(upgrade_tables(parts.store), name="upgrade-tables")
        try:
            await set_menus(bot, bot_commands())
            scheduler.start()
            await jobs.catch_up(parts.engine)
            log.info("bot started; polling %s", settings.telegram_api_base)
            await dispatcher.start_polling(bot, close_bot_session=False)
        finally:
            upgrading.cancel()
            scheduler.shutdown(wait=False)
            await buffer.close()
            await bot.session.close()
    log.info("bot stopped")
    return 0


async def run_console_mode(settings: Settings, args: argparse.Namespace) -> int:
    async with companion(settings) as (chat, _):
        await run_console(chat, Scope(settings.console_user_id))
    return 0


def _progress(label: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if done == total or done % max(total // 20, 1) == 0:
            print(f"\r{label}: {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)

    return report


async def run_backup(settings: Settings, args: argparse.Namespace) -> int:
    storage = await SQLiteStore.open(settings.db_path)
    try:
        result = await make_backup(
            storage, settings.backup_dir, utcnow(), settings.tz, settings.backup_keep_days, _progress("backup")
        )
    finally:
        await storage.close()
    print(f"backup written to {result.folder}: {result.files} users, {result.rows} memories")
    return 0


async def run_restore(settings: Settings, args: argparse.Namespace) -> int:
    result = await restore(args.path, settings.db_path, utcnow(), force=args.force, progress=_progress("restore"))
    kept = f"; previous database kept at {result.kept_old}" if result.kept_old else ""
    print(f"restored {result.rows} memories of {result.scopes} users into {settings.db_path}{kept}")
    return 0


async def run_memories(settings: Settings, args: argparse.Namespace) -> int:
    storage = await SQLiteStore.open(settings.db_path)
    try:
        memories = await storage.fetch_memories(Scope(args.user_id, args.chat))
    finally:
        await storage.close()
    print(memories_table(memories, settings.tz) if memories else f"no memories for user {args.user_id}")
    return 0


async def run_decay(settings: Settings, args: argparse.Namespace) -> int:
    async with services(settings, need_llm=False) as parts:
        report = await jobs.run_decay(parts.engine)
    print(f"decay done: {report.scopes} users, {report.decayed} memories decayed, {report.removed} removed")
    return 0


COMMANDS: dict[str, Callable[[Settings, argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "run": run_bot, "console": run_console_mode, "backup": run_backup, "restore": run_restore,
    "memories": run_memories, "decay": run_decay,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bot.py", description="Companion bot with long-term memory.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Telegram bot (default)")
    sub.add_parser("console", help="chat in the terminal as one local user")
    sub.add_parser("backup", help="write today's backup now")
    restore_p = sub.add_parser("restore", help="rebuild the database from a backup folder or snapshot")
    restore_p.add_argument("path", type=Path)
    restore_p.add_argument("--force", action="store_true", help="replace a database that holds memories")
    mem_p = sub.add_parser("memories", help="print a user's memories")
    mem_p.add_argument("user_id", type=int)
    mem_p.add_argument("--chat", type=int, default=None, help="group chat id, for a group scope")
    sub.add_parser("decay", help="run decay and cleanup now")
    args = parser.parse_args(argv)
    args.command = args.command or "run"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = load_settings()
        setup_logging(settings.log_level)
        return asyncio.run(COMMANDS[args.command](settings, args))
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except CompanionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
