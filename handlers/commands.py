"""/start_aiGF, /stop_aiGF and /help, how every router registers a row of the command table, and the gate of a
router that answers only commands."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command
from aiogram.types import BotCommand, Message

from companion.chat import texts
from companion.chat.buffer import Buffering
from companion.chat.command_table import Place, menu, row
from companion.chat.pipeline import ChatService
from handlers.filters import IN_PRIVATE, PREFIX
from handlers.scope import scope_of


def as_menu(items: dict[str, str]) -> list[BotCommand]:
    return [BotCommand(command=name, description=text) for name, text in items.items()]


def bot_commands() -> list[BotCommand]:
    """The default scope's menu (clients that ignore scopes), also the base of the operators' menu."""
    return as_menu(menu(Place.PRIVATE, default_only=True))


def command(place: Place | tuple[Place, ...], *names: str) -> Command:
    """The filter for these rows of the command table at ``place`` (each of several places, for a handler
    that answers in both); a name the table lacks fails at start-up, so every command a router answers
    is in the menus and help the table drives."""
    places = place if isinstance(place, tuple) else (place,)
    found = [row(at, name) for at in places for name in names]
    return Command(*names, prefix=PREFIX, ignore_case=any(r.ignore_case for r in found))


def could_be_command(message: Message) -> bool:
    """What a ``Command`` asks first: its text (or caption) starts, after leading whitespace, with the prefix.
    ``Command`` splits the text and raises and catches an exception to refuse one; a plain text would meet
    twenty of them."""
    said = message.text or message.caption
    return said is not None and said.lstrip()[:1] == PREFIX


async def may_be_command(message: Message, /) -> bool:
    # A coroutine, so aiogram awaits it on the event loop (handlers.filters).
    return could_be_command(message)


def commands_router(name: str) -> Router:
    """A router whose every message handler needs a command: a message that cannot be one skips it at its
    first filter. A router that also takes other messages must not be made here: the gate would hide them
    (``tests/test_filters.py`` holds every router to that)."""
    router = Router(name=name)
    router.message.filter(may_be_command)
    return router


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


async def stop_companion(message: Message, chat: ChatService, buffer: Buffering) -> None:
    scope = scope_of(message)
    if scope is not None:
        # What the user sent before the stop is answered before the stop is confirmed, in their order.
        await buffer.flush_now(scope)
        await respond(message, await chat.stop(scope))


async def show_help(message: Message) -> None:
    await message.answer(texts.help_text())


def build() -> Router:
    """A fresh router each call: aiogram attaches a router to one dispatcher only."""
    router = commands_router("commands")
    # Private chats only: groups answer these commands in handlers/groups.py, whose router comes first.
    router.message.filter(IN_PRIVATE)
    router.message.register(start_companion, command(Place.PRIVATE, "start_aiGF"))
    router.message.register(stop_companion, command(Place.PRIVATE, "stop_aiGF"))
    router.message.register(show_help, command(Place.PRIVATE, "help"))
    return router
