"""Admin commands: /mem_add, /mem_del, /mem_edit, /mem_export, /mem_stats, /mem_user. Only ``ADMIN_IDS``
may use them, and only in their private chat with the bot; anyone else gets "没有权限", and a group
gets a one-line hint; either way nothing is read or changed. The work is
``companion.ops.admin.admin_service.AdminService``'s; this router parses, checks and sends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.types import BotCommand, BotCommandScopeChat, BufferedInputFile, Message

from companion.chat.command_table import Place, menu
from companion.config.settings import Settings
from companion.core.errors import ChartUnavailableError, MemoryNotFoundError, NotYourMemoryError
from companion.ops.admin import admin_texts as texts
from companion.ops.admin.admin_service import AdminService, usage_chart
from handlers.commands import as_menu, bot_commands, command, commands_router

log = logging.getLogger(__name__)


def admin_commands() -> list[BotCommand]:
    return as_menu(menu(Place.OPERATOR))


async def register_admin_commands(bot: Bot, admin_ids: Sequence[int]) -> None:
    """The admin commands appear in the menu of the admins' own chats only."""
    for admin_id in admin_ids:
        try:
            await bot.set_my_commands([*bot_commands(), *admin_commands()],
                                      scope=BotCommandScopeChat(chat_id=admin_id))
        except TelegramAPIError as exc:  # an admin who never opened the bot has no chat yet
            log.warning("admin menu not set for %s: %s", admin_id, exc)


async def _allowed(message: Message, settings: Settings) -> bool:
    """An admin in the admin's own private chat. Anywhere else (a group, even one the admin is in) the
    answer would be read by everyone there: one line of hint, and nothing is read or changed."""
    if message.chat.type != "private":
        log.info("admin command in non-private chat %s ignored", message.chat.id)
        await message.reply(texts.PRIVATE_ONLY)
        return False
    if message.from_user is not None and message.from_user.id in settings.admin_ids:
        return True
    log.info("admin command refused for %s", message.from_user.id if message.from_user else None)
    await message.answer(texts.NO_PERMISSION)
    return False


async def _answer(message: Message, work: Callable[[], Awaitable[str]]) -> None:
    """Run an admin action and send its result, or why it did nothing (usage, no such memory, not
    this user's)."""
    try:
        text = await work()
    except texts.UsageError as exc:
        text = str(exc)
    except MemoryNotFoundError:
        text = texts.NOT_FOUND
    except NotYourMemoryError:
        text = texts.NOT_THIS_USER
    await message.answer(text)


async def mem_add(message: Message, command: CommandObject, settings: Settings, admin: AdminService) -> None:
    async def work() -> str:
        args = texts.parse_add(command.args)
        return texts.added(args.user_id, await admin.add(args.user_id, args.content, args.importance, args.validity))

    if await _allowed(message, settings):
        await _answer(message, work)


async def mem_del(message: Message, command: CommandObject, settings: Settings, admin: AdminService) -> None:
    async def work() -> str:
        user_id, handle = texts.parse_handle(command.args, "mem_del")
        return texts.deleted(user_id, handle, await admin.delete(user_id, handle))

    if await _allowed(message, settings):
        await _answer(message, work)


async def mem_edit(message: Message, command: CommandObject, settings: Settings, admin: AdminService) -> None:
    async def work() -> str:
        args = texts.parse_edit(command.args)
        return texts.edited(args.user_id, await admin.edit(args.user_id, args.handle, args.content, args.importance))

    if await _allowed(message, settings):
        await _answer(message, work)


async def mem_export(message: Message, command: CommandObject, settings: Settings, admin: AdminService) -> None:
    if not await _allowed(message, settings):
        return
    user_id, keyword = texts.parse_export(command.args)
    data, count = await admin.export(user_id, keyword)
    if not count:
        await message.answer(texts.NOTHING_TO_EXPORT)
        return
    name = f"memories_{user_id or 'all'}.csv"
    await message.answer_document(BufferedInputFile(data, filename=name), caption=texts.exported(count))


async def mem_stats(message: Message, settings: Settings, admin: AdminService) -> None:
    if not await _allowed(message, settings):
        return
    stats = await admin.stats()
    await message.answer(texts.admin_stats(stats))
    try:
        chart = await asyncio.to_thread(usage_chart, stats.usage)  # ~1 s of CPU the first time: off the loop
    except ChartUnavailableError:
        await message.answer(texts.NO_CHART)
        return
    await message.answer_photo(BufferedInputFile(chart, filename="usage.png"))


async def mem_user(message: Message, command: CommandObject, settings: Settings, admin: AdminService) -> None:
    async def work() -> str:
        return texts.user_summary(await admin.user(texts.parse_user(command.args)), settings.tz)

    if await _allowed(message, settings):
        await _answer(message, work)


def build() -> Router:
    router = commands_router("admin")
    for name, handler in (("mem_add", mem_add), ("mem_del", mem_del), ("mem_edit", mem_edit),
                          ("mem_export", mem_export), ("mem_stats", mem_stats), ("mem_user", mem_user)):
        router.message.register(handler, command(Place.OPERATOR, name))
    return router
