"""/dida_link, /dida_code, /dida_status, /dida_sync, /dida_unlink: the Dida365 kanban, in private chats.
The work is ``companion.kanban.service.KanbanService`` (the dispatcher's ``kanban``, absent when the
operator did not configure the integration)."""

from __future__ import annotations

import logging

from aiogram import Bot, Dispatcher, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.types import LinkPreviewOptions, Message

from companion.chat.command_table import DIDA, Place, offer
from companion.chat.pipeline import ChatService
from companion.config.settings import Settings
from companion.kanban import card_texts as texts
from companion.kanban.assembly import Kanban, open_kanban
from companion.kanban.service import KanbanService
from handlers.commands import command, commands_router
from handlers.filters import IN_PRIVATE

log = logging.getLogger(__name__)


CONFIRM_WORDS = ("删除", "delete")  # /dida_sync 删除: the cards that vanished at once go with their memories


async def dida_link(message: Message, kanban: KanbanService | None = None) -> None:
    if message.from_user is not None:
        text = texts.NOT_CONFIGURED if kanban is None else kanban.link_text(message.from_user.id)
        await message.answer(text, link_preview_options=LinkPreviewOptions(is_disabled=True))


async def dida_code(message: Message, command: CommandObject, kanban: KanbanService | None = None) -> None:
    if message.from_user is not None:
        await message.answer(texts.NOT_CONFIGURED if kanban is None else
                             await kanban.code(message.from_user.id, command.args or ""))


async def dida_status(message: Message, kanban: KanbanService | None = None) -> None:
    if message.from_user is not None:
        await message.answer(texts.NOT_CONFIGURED if kanban is None else await kanban.status(message.from_user.id))


async def dida_sync(message: Message, command: CommandObject, kanban: KanbanService | None = None) -> None:
    if message.from_user is not None:
        confirm = (command.args or "").strip() in CONFIRM_WORDS
        await message.answer(texts.NOT_CONFIGURED if kanban is None
                             else await kanban.sync_now(message.from_user.id, confirm=confirm))


async def dida_unlink(message: Message, command: CommandObject, kanban: KanbanService | None = None) -> None:
    if message.from_user is not None:
        choice = (command.args or "").strip().lower()
        await message.answer(texts.NOT_CONFIGURED if kanban is None else
                             await kanban.unlink(message.from_user.id, choice))


def build() -> Router:
    router = commands_router("dida")
    router.message.filter(IN_PRIVATE)
    router.message.register(dida_link, command(Place.PRIVATE, "dida_link"))
    router.message.register(dida_code, command(Place.PRIVATE, "dida_code"))
    router.message.register(dida_status, command(Place.PRIVATE, "dida_status"))
    router.message.register(dida_sync, command(Place.PRIVATE, "dida_sync"))
    router.message.register(dida_unlink, command(Place.PRIVATE, "dida_unlink"))
    return router


async def start_kanban(settings: Settings, chat: ChatService, bot: Bot, dispatcher: Dispatcher) -> Kanban | None:
    """The kanban when configured: its commands offered in menus and help, its service given to the
    handlers, its notices sent as messages, its loop and callback started. None when not configured."""
    kanban = open_kanban(settings, chat.engine, chat.forget)
    if kanban is None:
        return None
    offer(DIDA)
    dispatcher["kanban"] = kanban.service

    async def notify(user_id: int, text: str) -> None:
        try:
            await bot.send_message(user_id, text)
        except TelegramAPIError as exc:  # a user who blocked the bot: the kanban keeps syncing
            log.info("dida: notice to %s not delivered: %s", user_id, type(exc).__name__)

    kanban.service.notify = notify
    await kanban.start()
    return kanban
