"""A private chat's one-message commands: /why, /stats, /reset, /weekly, /followup, /start and its button,
and the "别再提" button under a follow-up."""

from __future__ import annotations

import contextlib
from datetime import tzinfo

from aiogram import F, Router
from aiogram.exceptions import TelegramBadRequest
from aiogram.filters import CommandObject
from aiogram.types import CallbackQuery, Message

from companion.chat import texts, views
from companion.chat.command_table import Place
from companion.chat.pipeline import ChatService
from companion.core.models import Memory, Scope
from companion.core.timeutil import utcnow
from companion.ops.jobs.proactive import set_weekly
from handlers import keyboards
from handlers.commands import command, commands_router
from handlers.keyboards import QUERY_CHARS, FollowUpCB, StartAction, StartCB
from handlers.scope import scope_of, scope_of_callback
from memory import MemoryEngine

SUPERGROUP_BASE = 1_000_000_000_000  # a supergroup's id is -(SUPERGROUP_BASE + n); its message links name n
WEEKLY_OFF_WORDS = frozenset({"off", "关", "关闭", "0"})


def message_link(memory: Memory) -> str | None:
    """Telegram links to a message only in supergroups and channels (t.me/c/<id>/<message>)."""
    chat_id, message_id = memory.source_chat_id, memory.source_message_id
    if chat_id is None or message_id is None or chat_id > -SUPERGROUP_BASE:
        return None
    return f"https://t.me/c/{-chat_id - SUPERGROUP_BASE}/{message_id}"


async def why_text(engine: MemoryEngine, scope: Scope, args: str, tz: tzinfo) -> tuple[str, bool]:
    """The answer to ``/why <args>`` and whether it shows a memory (then a group never sees it)."""
    return await views.why_text(engine, scope, args, tz, utcnow(), message_link)


async def why_command(message: Message, command: CommandObject, engine: MemoryEngine, tz: tzinfo) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    text, _ = await why_text(engine, scope, (command.args or "").strip()[:QUERY_CHARS], tz)
    await message.answer(text)


async def stats_command(message: Message, engine: MemoryEngine) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    await message.answer(await views.stats_text(engine, scope, utcnow()))


async def reset_command(message: Message, chat: ChatService) -> None:
    scope = scope_of(message)
    if scope is not None:
        await message.answer(await chat.reset(scope))


async def weekly_command(message: Message, command: CommandObject, engine: MemoryEngine) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    on = (command.args or "").strip().lower() not in WEEKLY_OFF_WORDS
    await set_weekly(engine, scope, on)
    await message.answer(texts.WEEKLY_ON if on else texts.WEEKLY_OFF)


async def followup_command(message: Message, command: CommandObject, engine: MemoryEngine) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    on = (command.args or "").strip().lower() not in WEEKLY_OFF_WORDS
    await engine.followups.switch(scope, on)
    await message.answer(texts.FOLLOWUP_ON if on else texts.FOLLOWUP_OFF)


async def on_followup_stop(query: CallbackQuery, callback_data: FollowUpCB, engine: MemoryEngine) -> None:
    """"别再提" under a follow-up: that memory is never brought up again (the button goes)."""
    scope = scope_of_callback(query)
    if scope is None:
        await query.answer()
        return
    stopped = await engine.followups.stop(scope, callback_data.handle, utcnow())
    await query.answer(texts.FOLLOWUP_STOPPED if stopped else texts.FOLLOWUP_GONE)
    if isinstance(query.message, Message):
        with contextlib.suppress(TelegramBadRequest):
            await query.message.edit_reply_markup(reply_markup=None)


async def start_command(message: Message, chat: ChatService) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    if await chat.active(scope):
        await message.answer(texts.help_text())
        return
    await message.answer(texts.START_GREETING, reply_markup=keyboards.start_companion())


async def on_start_button(query: CallbackQuery, chat: ChatService) -> None:
    scope = scope_of_callback(query)
    await query.answer()
    if scope is not None and isinstance(query.message, Message):
        # A double tap: both presses carry the keyboard, the second edit is "not modified"; still start.
        with contextlib.suppress(TelegramBadRequest):
            await query.message.edit_reply_markup(reply_markup=None)
        await query.message.answer(await chat.start(scope))


def build() -> Router:
    router = commands_router("user_commands")
    router.message.register(why_command, command(Place.PRIVATE, "why"))
    router.message.register(stats_command, command(Place.PRIVATE, "stats"))
    router.message.register(reset_command, command(Place.PRIVATE, "reset"))
    router.message.register(weekly_command, command(Place.PRIVATE, "weekly"))
    router.message.register(followup_command, command(Place.PRIVATE, "followup"))
    router.callback_query.register(on_followup_stop, FollowUpCB.filter())
    router.message.register(start_command, command(Place.PRIVATE, "start"))
    router.callback_query.register(on_start_button, StartCB.filter(F.action == StartAction.ON))
    return router
