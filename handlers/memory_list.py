"""/memories and the buttons on one memory: pages and searches of the list, the archive, and the buttons
of receipts and list entries (fine, edit, forget, archive, promote, restore, undo a rewording). A handle in
callback data is checked against its owner by the engine, so another user's button changes nothing."""

from __future__ import annotations

from datetime import datetime

from aiogram import Router
from aiogram.filters import CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardMarkup, Message

from companion.chat import texts, views
from companion.chat.command_table import Place
from companion.chat.pipeline import ChatService
from companion.core.errors import MemoryNotFoundError, NothingToUndoError, NotYourMemoryError
from companion.core.models import Scope, Status
from companion.core.tiers import Action
from companion.core.timeutil import utcnow
from handlers import keyboards
from handlers.board import with_board_button
from handlers.commands import command, commands_router
from handlers.delivery import deliver, edit_shown
from handlers.forgetting import forget_here
from handlers.keyboards import ALERT_CHARS, QUERY_CHARS, MemoryAction, MemoryCB, PageCB, UndoCB
from handlers.scope import refuse, scope_of, scope_of_callback
from memory import MemoryEngine


async def _page(engine: MemoryEngine, scope: Scope, page: int, query: str, archived: bool,
                now: datetime) -> tuple[str, InlineKeyboardMarkup | None]:
    query = keyboards.page_query(query)
    found = await views.memory_page(engine, scope, page, query, archived, now)
    if not found.shown:
        return found.text, keyboards.back_to_list() if archived else None  # an empty archive: a way back
    return found.text, keyboards.memory_page(list(found.shown), found.page, found.pages, query, archived)


async def list_memories(message: Message, command: CommandObject, engine: MemoryEngine, board_url: str = "") -> None:
    scope = scope_of(message)
    if scope is None:
        return
    text, markup = await _page(engine, scope, 0, (command.args or "").strip()[:QUERY_CHARS], False, utcnow())
    markup = with_board_button(markup, board_url, scope)
    if message.bot is None:  # a message not from an update (never in the bot): answer as it can
        await message.answer(text, reply_markup=markup)
    else:  # whatever the list holds, split under Telegram's limit
        await deliver(message.bot, message.chat.id, text, markup)


async def on_page(query: CallbackQuery, callback_data: PageCB, engine: MemoryEngine) -> None:
    scope = scope_of_callback(query)
    if scope is None or not isinstance(query.message, Message):
        await query.answer()
        return
    text, markup = await _page(engine, scope, callback_data.page, callback_data.query, callback_data.archived,
                               utcnow())
    await edit_shown(query.message, text, markup)
    await query.answer()


async def on_memory_button(query: CallbackQuery, callback_data: MemoryCB, engine: MemoryEngine,
                           chat: ChatService) -> None:
    scope = scope_of_callback(query)
    if scope is None or not isinstance(query.message, Message):
        await query.answer()
        return
    now, handle = utcnow(), callback_data.handle
    try:
        memory = await engine.get(scope, handle)
        if callback_data.action == MemoryAction.OK:
            await query.message.edit_reply_markup(reply_markup=None)
            await query.answer("好的")
            return
        if callback_data.action == MemoryAction.EDIT:
            await chat.begin_edit(scope, handle)
            await query.answer()
            await query.message.answer(texts.EDIT_PROMPT)
            return
        if callback_data.action == MemoryAction.FORGET:
            await forget_here(chat, scope, [memory])
            note = texts.forgotten(1)
        elif callback_data.action == MemoryAction.ARCHIVE:
            memory = await engine.archive(scope, handle, now)
            note = texts.review_done(memory, Action.ARCHIVE)
        elif callback_data.action == MemoryAction.PROMOTE:
            memory = await engine.promote(scope, handle, now)
            note = texts.review_done(memory, Action.PROMOTE)
        elif callback_data.action == MemoryAction.RESTORE:
            memory = await engine.restore(scope, handle, now)
            note = f"已恢复：{memory.shown}"
        else:
            await query.answer()
            return
    except (NotYourMemoryError, MemoryNotFoundError) as error:
        await refuse(query, error)
        return
    await query.answer(note[:ALERT_CHARS])
    if callback_data.action == MemoryAction.FORGET and keyboards.is_receipt(query.message.reply_markup):
        await edit_shown(query.message, texts.forgotten(1), None)  # a receipt for a forgotten memory
        return
    restored = callback_data.action == MemoryAction.RESTORE
    if restored and not await engine.memories(scope, {Status.ARCHIVED}):
        restored = False  # the archive is empty now: the main list, where the restored memory is back
    text, markup = await _page(engine, scope, callback_data.page, "", restored, now)
    await edit_shown(query.message, f"{note}\n\n{text}", markup)


async def on_undo(query: CallbackQuery, callback_data: UndoCB, engine: MemoryEngine) -> None:
    """A receipt's undo: the memory gets back the words the save replaced."""
    scope = scope_of_callback(query)
    if scope is None or not isinstance(query.message, Message):
        await query.answer()
        return
    try:
        memory = await engine.undo_rewording(scope, callback_data.handle, utcnow(), callback_data.earlier)
    except (NotYourMemoryError, MemoryNotFoundError, NothingToUndoError) as error:
        await refuse(query, error, gone=texts.NOTHING_TO_UNDO)
        return
    await query.answer("已撤销")
    await edit_shown(query.message, texts.undone(memory), keyboards.receipt(memory))


def build() -> Router:
    router = commands_router("memory_list")
    router.message.register(list_memories, command(Place.PRIVATE, "memories"))
    router.callback_query.register(on_memory_button, MemoryCB.filter())
    router.callback_query.register(on_undo, UndoCB.filter())
    router.callback_query.register(on_page, PageCB.filter())
    return router
