"""What a group member asks about their own memories of a group goes to their private chat, never to
the group: the /memories list, the /forget confirmation (natural-language forgetting too) and /why. The
buttons sent there name the (group, user) scope they act on (``keyboards.Group*CB``). When the user never
opened a private chat with the bot (Telegram answers 403), the group gets a short hint, never the list."""

from __future__ import annotations

import logging
from datetime import tzinfo

from aiogram import Bot
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.types import InlineKeyboardMarkup, Message

from companion.chat import group_texts as gt
from companion.chat import texts
from handlers.forgetting import forget_prompt
from handlers.keyboards import PAGE_SIZE, QUERY_CHARS
from handlers.scope import scope_of
from handlers.user_commands import why_text
from memory import MemoryEngine

log = logging.getLogger(__name__)


def titled(title: str | None, text: str) -> str:
    """A group's memories in a private chat say which group they belong to."""
    return f"「{title or gt.SOME_GROUP}」\n{text}"


async def to_private(bot: Bot, user_id: int, text: str, markup: InlineKeyboardMarkup | None = None) -> bool:
    """Send to the user's private chat, the buttons on the last part; False when Telegram refuses (the
    user never started a private chat, or blocked the bot)."""
    parts = texts.split_message(text)
    try:
        for i, part in enumerate(parts):
            await bot.send_message(user_id, part, reply_markup=markup if i == len(parts) - 1 else None)
    except TelegramAPIError as exc:
        log.info("private message to a group member not delivered: %s", exc)
        return False
    return True


async def send_privately(bot: Bot, message: Message, text: str, markup: InlineKeyboardMarkup | None = None) -> bool:
    """Send something not for the whole group to the asker's private chat and say so in the group
    ("我私信你了"); when the user never started a private chat, say how to allow it."""
    if message.from_user is None:
        return False
    sent = await to_private(bot, message.from_user.id, titled(message.chat.title, text), markup)
    await message.reply(gt.SENT_PRIVATELY if sent else gt.START_PRIVATE_FIRST)
    return sent


async def memories_in_group(message: Message, bot: Bot, engine: MemoryEngine) -> None:
    """The asker's memories of this group, sent privately (a read-only page)."""
    scope = scope_of(message)
    if scope is None:
        return
    found = await engine.memories(scope)
    found.sort(key=lambda m: (-m.importance, -m.id))
    pages = max(1, -(-len(found) // PAGE_SIZE))
    await send_privately(bot, message, texts.memory_list(found[:PAGE_SIZE], 0, pages) if found else texts.NO_MEMORIES)


async def forget_in_group(message: Message, command: CommandObject, bot: Bot, engine: MemoryEngine) -> None:
    """/forget in a group: the confirmation lists memories, so it goes privately, its buttons acting on
    this group's scope; usage and "nothing found" stay in the group (they show no memory)."""
    scope = scope_of(message)
    if scope is None:
        return
    text, markup = await forget_prompt(engine, scope, (command.args or "").strip())
    if markup is None:
        await message.reply(text)
        return
    await send_privately(bot, message, text, markup)


async def why_in_group(message: Message, command: CommandObject, bot: Bot, engine: MemoryEngine, tz: tzinfo) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    text, shows_memory = await why_text(engine, scope, (command.args or "").strip()[:QUERY_CHARS], tz)
    if not shows_memory:
        await message.reply(text)
        return
    await send_privately(bot, message, text)
