"""Group chats: the companion answers only when addressed (a mention, a reply to its message, or a
command naming it) and only the speaker's own (group, user) memories are used. Everything else said in
the group only feeds the group's short-term context. Admin settings are checked with getChatMember."""

from __future__ import annotations

import logging
from enum import StrEnum

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject
from aiogram.filters.callback_data import CallbackData
from aiogram.types import (
    BotCommand,
    BotCommandScopeAllChatAdministrators,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    BotCommandScopeDefault,
    CallbackQuery,
    Message,
    User,
)
from aiogram.utils.keyboard import InlineKeyboardBuilder

from companion.chat import group_texts as gt
from companion.chat import texts
from companion.chat.buffer import Buffering
from companion.chat.command_table import Place, menu
from companion.chat.group import COMPANION_NAME, GroupSettings, GroupTurn, Rooms
from companion.chat.pipeline import ChatService
from companion.config.settings import Settings
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from handlers.chat import answer_turn
from handlers.commands import as_menu, bot_commands, command, commands_router, start_companion, stop_companion
from handlers.filters import CAPTION, TEXT, Inline
from handlers.group_private import forget_in_group, memories_in_group, why_in_group
from handlers.scope import scope_of
from memory import MemoryEngine

log = logging.getLogger(__name__)

GROUP_TYPES = frozenset({"group", "supergroup"})
ADMIN_STATUSES = frozenset({"creator", "administrator"})
IN_GROUP = Inline(F.chat.type.in_(GROUP_TYPES))
ON_WORDS = frozenset({"on", "开", "打开", "1", "yes"})
OFF_WORDS = frozenset({"off", "关", "关闭", "0", "no"})

class Confirm(StrEnum):
    YES = "yes"
    NO = "no"


class ForgetGroupCB(CallbackData, prefix="fg"):
    """The /forget_group confirmation; ``by`` is the admin who asked: only that person's press counts.
    0 when an anonymous admin asked (whose account nobody knows): then any admin's press counts."""

    action: str  # Confirm
    by: int


async def set_menus(bot: Bot, private: list[BotCommand] | None = None) -> None:
    """The command menu per scope, from the command table: private chats, groups, and group administrators
    (who also see the group settings). The default scope keeps ``private`` (the private menu without the
    group-only settings) for clients that ignore scopes."""
    await bot.set_my_commands(private or bot_commands(), scope=BotCommandScopeDefault())
    await bot.set_my_commands(as_menu(menu(Place.PRIVATE)), scope=BotCommandScopeAllPrivateChats())
    await bot.set_my_commands(as_menu(menu(Place.GROUP)), scope=BotCommandScopeAllGroupChats())
    await bot.set_my_commands(as_menu({**menu(Place.GROUP), **menu(Place.GROUP_ADMIN)}),
                              scope=BotCommandScopeAllChatAdministrators())


# ---- addressing ------------------------------------------------------------------------------------

def addressed_to(message: Message, me: User) -> bool:
    """A mention of the bot (@username or a text mention), or a reply to one of its messages."""
    replied = message.reply_to_message
    if replied is not None and replied.from_user is not None and replied.from_user.id == me.id:
        return True
    text = message.text if message.text is not None else message.caption or ""
    for entity in message.entities or message.caption_entities or []:
        if entity.type == "text_mention" and entity.user is not None and entity.user.id == me.id:
            return True
        if entity.type == "mention" and me.username and \
                entity.extract_from(text).lower() == f"@{me.username.lower()}":
            return True
    return False


def without_mention(text: str, me: User) -> str:
    """The message as said to the bot: its own @username taken out (the model needs no handle)."""
    if not me.username:
        return text.strip()
    said, lowered, handle = text, text.lower(), f"@{me.username.lower()}"
    while (at := lowered.find(handle)) >= 0:
        said, lowered = said[:at] + said[at + len(handle):], lowered[:at] + lowered[at + len(handle):]
    return said.strip() or text.strip()


def speaker(message: Message) -> str:
    return message.from_user.full_name if message.from_user is not None else "?"


# ---- text in a group -------------------------------------------------------------------------------

async def on_group_text(message: Message, bot: Bot, chat: ChatService, buffer: Buffering, rooms: Rooms,
                        settings: Settings) -> None:
    said = message.text if message.text is not None else message.caption
    scope = scope_of(message)
    if scope is None or said is None or message.from_user is None:
        return
    me = await bot.me()
    room, name = rooms.room(message.chat.id), speaker(message)
    if not addressed_to(message, me):
        room.add(name, said, scope.user_id)  # short-term context only: never queued, never a memory
        return
    text = without_mention(said, me)
    if not await chat.active(scope):
        room.add(name, text, scope.user_id)
        if await chat.hints.allow(scope):
            await message.reply(gt.GROUP_NOT_STARTED.format(bot=me.username))
        return
    chat_id, message_id = message.chat.id, message.message_id

    async def flush(joined: str) -> None:
        # The room as it is when the turn is answered, before this turn's words (which the turn carries).
        # The group's switches are read with the turn's context (``GroupTurn.settled``).
        turn = GroupTurn(speaker=name, room=room.render(), limit=settings.group_memory_limit,
                         title=message.chat.title)
        room.add(name, joined, scope.user_id)
        room.add(COMPANION_NAME, await answer_turn(bot, chat, buffer, scope, chat_id, joined, message_id, turn),
                 scope.user_id)

    buffer.push(scope, text, flush)


# ---- commands --------------------------------------------------------------------------------------

async def help_in_group(message: Message, bot: Bot) -> None:
    await message.reply(gt.group_help().format(bot=(await bot.me()).username))


def switch(command: CommandObject) -> bool | None:
    word = (command.args or "").strip().lower()
    return True if word in ON_WORDS else False if word in OFF_WORDS else None


async def share_private(message: Message, command: CommandObject, groups: GroupSettings) -> None:
    """Per user, wherever it is sent: may the user's private memories be used in groups."""
    if message.from_user is None or message.from_user.is_bot:
        return
    on = switch(command)
    if on is None:
        state = gt.on_off(await groups.shares_private(message.from_user.id))
        await message.reply(gt.SHARE_STATE.format(state=state))
        return
    await groups.set_share_private(message.from_user.id, on)
    await message.reply(gt.SHARE_ON if on else gt.SHARE_OFF)


async def is_admin(bot: Bot, chat_id: int, user_id: int) -> bool:
    try:
        member = await bot.get_chat_member(chat_id, user_id)
    except TelegramAPIError as exc:
        log.info("admin check in chat %s failed: %s", chat_id, exc)
        return False
    return member.status in ADMIN_STATUSES


def anonymous_admin(message: Message) -> bool:
    """An admin posting as the group itself (Telegram shows the group, the sender is GroupAnonymousBot)."""
    return message.sender_chat is not None and message.sender_chat.id == message.chat.id


async def sent_by_admin(bot: Bot, message: Message) -> bool:
    """Only admins can post as the group, so an anonymous sender is one; a channel never is."""
    if anonymous_admin(message):
        return True
    if message.sender_chat is not None or message.from_user is None:
        return False
    return await is_admin(bot, message.chat.id, message.from_user.id)


async def not_a_person(message: Message, bot: Bot, rooms: Rooms) -> None:
    """A message from an anonymous admin or on behalf of a channel: no personal scope exists for it, so
    nothing is stored; what is addressed to the bot (a command, a mention) gets a hint to use one's own
    account, the rest is only context. A channel's automatic forward into its discussion group is ignored."""
    if message.is_automatic_forward:
        return
    said = message.text if message.text is not None else message.caption or ""
    me = await bot.me()
    first = said.split(maxsplit=1)[0] if said.startswith("/") else ""
    for_me = bool(first) and ("@" not in first or first.lower().endswith(f"@{(me.username or '').lower()}"))
    if for_me or addressed_to(message, me):
        await message.reply(gt.ANONYMOUS_ADMIN if anonymous_admin(message) else gt.AS_CHANNEL)
        return
    if said and message.sender_chat is not None:  # named as Telegram shows it: the signature, else the chat
        rooms.room(message.chat.id).add(message.author_signature or message.sender_chat.title or "?", said)


async def group_memory(message: Message, command: CommandObject, bot: Bot, groups: GroupSettings) -> None:
    on = switch(command)
    if on is None:
        state = gt.on_off(await groups.memory_on(message.chat.id))
        await message.reply(gt.GROUP_MEMORY_STATE.format(state=state))
        return
    if not await sent_by_admin(bot, message):
        await message.reply(gt.ADMINS_ONLY)
        return
    await groups.set_memory(message.chat.id, on)
    await message.reply(gt.GROUP_MEMORY_ON if on else gt.GROUP_MEMORY_OFF)


async def forget_group(message: Message, bot: Bot) -> None:
    if not await sent_by_admin(bot, message):
        await message.reply(gt.ADMINS_ONLY)
        return
    by = 0 if anonymous_admin(message) or message.from_user is None else message.from_user.id
    builder = InlineKeyboardBuilder()
    builder.button(text=gt.FORGET_GROUP_YES, callback_data=ForgetGroupCB(action=Confirm.YES, by=by))
    builder.button(text=gt.FORGET_GROUP_NO, callback_data=ForgetGroupCB(action=Confirm.NO, by=by))
    await message.reply(gt.CONFIRM_FORGET_GROUP, reply_markup=builder.as_markup())


async def on_forget_group(query: CallbackQuery, callback_data: ForgetGroupCB, bot: Bot, chat: ChatService,
                          groups: GroupSettings, rooms: Rooms) -> None:
    message = query.message
    if not isinstance(message, Message) or message.chat.type not in GROUP_TYPES:
        await query.answer()
        return
    # The button is checked against the presser: only the admin who asked, and still an admin.
    if callback_data.by not in (0, query.from_user.id) or not await is_admin(bot, message.chat.id, query.from_user.id):
        await query.answer(gt.ONLY_PRESSER, show_alert=True)
        return
    await query.answer()
    if callback_data.action != Confirm.YES:
        await message.edit_text(texts.CANCELLED, reply_markup=None)
        return
    count = 0
    for scope in await groups.scopes_of(message.chat.id):
        await groups.clear_queued(scope)  # queued turns would teach the forgotten facts again
        count += await chat.forget(scope, None)
    rooms.clear(message.chat.id)
    log.info("group %s forgot %d memories at an admin's request", message.chat.id, count)
    await message.edit_text(gt.GROUP_FORGOTTEN.format(count=count), reply_markup=None)


async def on_migration(message: Message, engine: MemoryEngine, chat: ChatService, buffer: Buffering,
                       groups: GroupSettings, rooms: Rooms) -> None:
    """A group became a supergroup and got a new id: Telegram says so in the old chat (migrate_to) and in
    the new one (migrate_from). Whichever arrives first moves everything; the other finds nothing left."""
    if message.migrate_to_chat_id is not None:
        old, new = message.chat.id, message.migrate_to_chat_id
    elif message.migrate_from_chat_id is not None:
        old, new = message.migrate_from_chat_id, message.chat.id
    else:
        return
    # aiogram has confirmed the update already and Telegram sends it once: the durable marker comes
    # before anything else, so a crash from here on is finished at the next start (resume_moves).
    await engine.begin_move(old, new, utcnow())
    await groups.record_move(old, new)
    for scope in await groups.scopes_of(old):
        await buffer.flush_now(scope)  # answered (and queued for memory) under the old id, then moved
    moved = await engine.move_chat(old, new, utcnow())
    for scope in moved:
        chat.moved(scope, Scope(scope.user_id, new))
    rooms.move(old, new)
    log.info("group %s became %s: %d memory scopes moved", old, new, len(moved))


async def resume_moves(engine: MemoryEngine, chat: ChatService, groups: GroupSettings) -> int:
    """At start-up, before polling: finish the group moves a crash cut short; returns how many."""
    finished = await engine.finish_moves(utcnow())
    for old, new, moved in finished:
        await groups.record_move(old, new)
        for scope in moved:
            chat.moved(scope, Scope(scope.user_id, new))
        log.info("group %s became %s: an unfinished move completed at start-up (%d scopes)", old, new, len(moved))
    return len(finished)


def build() -> Router:
    router = Router(name="groups")
    # Everything but share_private is for groups only: one router-wide check, so a private message
    # passes this router with one filter instead of one per handler.
    in_group = Router(name="groups_only")
    in_group.message.filter(IN_GROUP)
    # Admin commands first: an anonymous admin may use them; every other message of a sender that is a
    # chat (an anonymous admin, a channel) stops at not_a_person, before anything personal.
    in_group.message.register(help_in_group, command(Place.GROUP, "help", "start"))
    in_group.message.register(group_memory, command(Place.GROUP_ADMIN, "group_memory"))
    in_group.message.register(forget_group, command(Place.GROUP_ADMIN, "forget_group"))
    in_group.message.register(on_migration, Inline(F.migrate_to_chat_id | F.migrate_from_chat_id))
    in_group.message.register(not_a_person, Inline(F.sender_chat))
    in_group.message.register(share_private, command(Place.GROUP, "share_private"))
    in_group.message.register(start_companion, command(Place.GROUP, "start_aiGF"))
    in_group.message.register(stop_companion, command(Place.GROUP, "stop_aiGF"))
    in_group.message.register(memories_in_group, command(Place.GROUP, "memories"))
    in_group.message.register(forget_in_group, command(Place.GROUP, "forget"))
    in_group.message.register(why_in_group, command(Place.GROUP, "why"))
    in_group.message.register(on_group_text, TEXT)
    in_group.message.register(on_group_text, CAPTION)
    private = commands_router("groups_private")
    private.message.register(share_private, command(Place.PRIVATE, "share_private"))
    router.include_routers(in_group, private)
    router.callback_query.register(on_forget_group, ForgetGroupCB.filter())
    return router
