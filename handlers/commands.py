"""/start_aiGF, /stop_aiGF and /help."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command, CommandStart
from aiogram.types import BotCommand, Message

from companion import texts
from companion.buffer import MessageBuffer
from companion.chat import ChatService
from handlers.scope import scope_of

router = Router(name="commands")
# Group chats come with the group-chat issue; until then the companion lives in private chats only.
router.message.filter(F.chat.type == "private")


def bot_commands() -> list[BotCommand]:
    return [BotCommand(command=name, description=text) for name, text in texts.COMMANDS.items()]


@router.message(Command("start_aiGF", ignore_case=True))
async def start_companion(message: Message, chat: ChatService) -> None:
    scope = scope_of(message)
    if scope is not None:
        await message.answer(await chat.start(scope))


@router.message(Command("stop_aiGF", ignore_case=True))
async def stop_companion(message: Message, chat: ChatService, buffer: MessageBuffer) -> None:
    scope = scope_of(message)
    if scope is not None:
        buffer.cancel(scope)
        await message.answer(await chat.stop(scope))


@router.message(Command("help"))
@router.message(CommandStart())
async def show_help(message: Message) -> None:
    await message.answer(texts.HELP)
