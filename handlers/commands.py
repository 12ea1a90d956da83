"""/start_aiGF, /stop_aiGF and /help."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command
from aiogram.types import BotCommand, Message

from companion.chat import texts
from companion.chat.buffer import MessageBuffer
from companion.chat.pipeline import ChatService
from handlers.scope import scope_of


def bot_commands() -> list[BotCommand]:
    return [BotCommand(command=name, description=text) for name, text in texts.COMMANDS.items()]


async def respond(message: Message, text: str) -> None:
    """In a group the bot replies to the message that addressed it; in a private chat it just answers."""
    if message.chat.type == "private":
        await message.answer(text)
    else:
        await message.reply(text)


async def start_companion(message: Message, chat: ChatService) -> None:
    scope = scope_of(message)
    if scope is not None:
        await respond(message, await chat.start(scope))


async def stop_companion(message: Message, chat: ChatService, buffer: MessageBuffer) -> None:
    scope = scope_of(message)
    if scope is not None:
        # What the user sent before the stop is answered before the stop is confirmed, in their order.
        await buffer.flush_now(scope)
        await respond(message, await chat.stop(scope))


async def show_help(message: Message) -> None:
    await message.answer(texts.HELP)


def build() -> Router:
    """A fresh router each call: aiogram attaches a router to one dispatcher only."""
    router = Router(name="commands")
    # Group chats come with the group-chat issue; until then the companion lives in private chats only.
    router.message.filter(F.chat.type == "private")
    router.message.register(start_companion, Command("start_aiGF", ignore_case=True))
    router.message.register(stop_companion, Command("stop_aiGF", ignore_case=True))
    router.message.register(show_help, Command("help"))
    return router
