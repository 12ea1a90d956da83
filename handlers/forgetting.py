"""/forget in a private chat and its confirmation buttons (also those of a group's /forget, confirmed in
the private chat), and the forgetting every other button uses: the engine forgets, and the group's room
drops what it still shows of it. A press acts on the presser's own scope only."""

from __future__ import annotations

from collections.abc import Sequence

from aiogram import Router
from aiogram.filters import CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardMarkup, Message

from companion.chat import texts, views
from companion.chat.buffer import Buffering
from companion.chat.command_table import Place
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, Scope
from companion.core.timeutil import utcnow
from handlers import keyboards
from handlers.commands import command, commands_router
from handlers.delivery import deliver, edit_shown
from handlers.keyboards import ForgetAction, ForgetCB, GroupForgetCB, GroupReviewCB, ReviewCB
from handlers.scope import refuse, scope_of, scope_of_callback
from memory import MemoryEngine


async def forget_prompt(engine: MemoryEngine, scope: Scope, args: str) -> tuple[str, InlineKeyboardMarkup | None]:
    """The answer to ``/forget <args>``: with buttons when it lists memories (the lists a group never sees)."""
    asked = await views.forget_prompt(engine, scope, args, utcnow())
    if asked.forget_all is not None:
        return asked.text, keyboards.forget_all(asked.forget_all, scope)
    if asked.matches:
        return asked.text, keyboards.forget_choices(list(asked.matches), scope)
    return asked.text, None


async def forget_command(message: Message, command: CommandObject, engine: MemoryEngine) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    text, markup = await forget_prompt(engine, scope, (command.args or "").strip())
    if message.bot is None:  # a message not from an update (never in the bot): answer as it can
        await message.answer(text, reply_markup=markup)
    else:  # whatever the list holds, split under Telegram's limit
        await deliver(message.bot, message.chat.id, text, markup)


async def pressed_scope(query: CallbackQuery, data: ForgetCB | ReviewCB, groups: GroupSettings) -> Scope | None:
    """The scope a press acts on: a group-scoped button (sent to a private chat) names it (under the
    group's current id) and counts only for its own user; any other button acts on the presser's scope in
    the chat where it was pressed."""
    if isinstance(data, GroupForgetCB | GroupReviewCB):
        return Scope(data.user, await groups.current_id(data.chat)) if query.from_user.id == data.user else None
    return scope_of_callback(query)


async def forget_here(chat: ChatService, scope: Scope, memories: Sequence[Memory] | None) -> int:
    """Forget (everything with ``None``); the session, the spools and the group's room follow the forget
    (``chat.followers``)."""
    return await chat.forget(scope, None if memories is None else [m.id for m in memories])


async def on_forget(query: CallbackQuery, callback_data: ForgetCB, engine: MemoryEngine, chat: ChatService,
                    groups: GroupSettings, buffer: Buffering) -> None:
    scope = await pressed_scope(query, callback_data, groups)
    if scope is None or not isinstance(query.message, Message):
        await query.answer(texts.NOT_YOURS if isinstance(callback_data, GroupForgetCB) else None)
        return
    if callback_data.action == ForgetAction.CANCEL:
        await edit_shown(query.message, texts.CANCELLED, None)
        await query.answer()
        return
    if callback_data.action == ForgetAction.ALL:
        buffer.take(scope)  # said before the press and not answered yet: it goes with the rest
        count = await forget_here(chat, scope, None)
        await edit_shown(query.message, texts.forgot_all(count), None)
        await query.answer()
        return
    try:
        memory = await engine.get(scope, callback_data.handle)
    except (NotYourMemoryError, MemoryNotFoundError) as error:
        await refuse(query, error)
        return
    count = await forget_here(chat, scope, [memory])
    await query.answer(texts.forgotten(count))
    # The choice is made: the buttons go, as after 取消 (a second press would only find nothing to forget).
    await edit_shown(query.message, f"{query.message.text or ''}\n\n{texts.forgotten(count)}", None)


def build() -> Router:
    router = commands_router("forgetting")
    router.message.register(forget_command, command(Place.PRIVATE, "forget"))
    router.callback_query.register(on_forget, ForgetCB.filter())
    router.callback_query.register(on_forget, GroupForgetCB.filter())
    return router
