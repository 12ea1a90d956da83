"""The user's own memories in Telegram: /memories, /forget, /why, /stats, /reset, /weekly, /start, and
every button on receipts, lists and reviews. Each acts on the presser's own scope only: a handle in
callback data is checked against its owner by the engine, so another user's button changes nothing."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, tzinfo

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError, TelegramBadRequest, TelegramForbiddenError
from aiogram.filters import CommandObject
from aiogram.types import CallbackQuery, InlineKeyboardMarkup, Message

from companion.chat import group_texts as gt
from companion.chat import texts, views
from companion.chat.buffer import Buffering
from companion.chat.commands import Place
from companion.chat.group import GroupSettings, Rooms
from companion.chat.pipeline import ChatService
from companion.core.errors import MemoryNotFoundError, NothingToUndoError, NotYourMemoryError
from companion.core.models import Memory, Scope, Status, Tier
from companion.core.tiers import Action, Suggestion
from companion.core.timeutil import utcnow
from companion.ops.reviews import ReviewSender, WeeklySender, WeekSummary, set_weekly
from handlers import keyboards
from handlers.commands import command
from handlers.keyboards import (
    ALERT_CHARS,
    QUERY_CHARS,
    REVIEW_UNDO,
    ForgetAction,
    ForgetCB,
    GroupForgetCB,
    GroupReviewCB,
    MemoryAction,
    MemoryCB,
    PageCB,
    ReviewCB,
    StartAction,
    StartCB,
    UndoCB,
)
from handlers.scope import scope_of, scope_of_callback
from memory import MemoryEngine

log = logging.getLogger(__name__)

UNDO_SECONDS = 60
SUPERGROUP_BASE = 1_000_000_000_000  # a supergroup's id is -(SUPERGROUP_BASE + n); its message links name n


# ---- /memories -------------------------------------------------------------------------------------

async def _page(engine: MemoryEngine, scope: Scope, page: int, query: str, archived: bool,
                now: datetime) -> tuple[str, InlineKeyboardMarkup | None]:
    query = keyboards.page_query(query)
    found = await views.memory_page(engine, scope, page, query, archived, now)
    if not found.shown:
        return found.text, keyboards.back_to_list() if archived else None  # an empty archive: a way back
    return found.text, keyboards.memory_page(list(found.shown), found.page, found.pages, query, archived)


async def list_memories(message: Message, command: CommandObject, engine: MemoryEngine) -> None:
    scope = scope_of(message)
    if scope is None:
        return
    text, markup = await _page(engine, scope, 0, (command.args or "").strip()[:QUERY_CHARS], False, utcnow())
    await message.answer(text, reply_markup=markup)


async def on_page(query: CallbackQuery, callback_data: PageCB, engine: MemoryEngine) -> None:
    scope = scope_of_callback(query)
    if scope is None or not isinstance(query.message, Message):
        await query.answer()
        return
    text, markup = await _page(engine, scope, callback_data.page, callback_data.query, callback_data.archived,
                               utcnow())
    await _edit(query.message, text, markup)
    await query.answer()


async def on_memory_button(query: CallbackQuery, callback_data: MemoryCB, engine: MemoryEngine,
                           chat: ChatService, rooms: Rooms) -> None:
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
            await forget_here(chat, rooms, scope, [memory])
            note = texts.forgotten(1)
        elif callback_data.action == MemoryAction.ARCHIVE:
            memory = await engine.archive(scope, handle, now)
            note = texts.review_done(memory, Action.ARCHIVE)
        elif callback_data.action == MemoryAction.PROMOTE:
            memory = await engine.promote(scope, handle, now)
            note = texts.review_done(memory, Action.PROMOTE)
        elif callback_data.action == MemoryAction.RESTORE:
            memory = await engine.restore(scope, handle, now)
            note = f"已恢复：{memory.event}"
        else:
            await query.answer()
            return
    except NotYourMemoryError:
        await query.answer(texts.NOT_YOURS, show_alert=True)
        return
    except MemoryNotFoundError:
        await query.answer(texts.MEMORY_GONE, show_alert=True)
        return
    await query.answer(note[:ALERT_CHARS])
    receipt = query.message.text and query.message.text.startswith(("记住了", "改好了", "改成了", "已撤销"))
    if callback_data.action == MemoryAction.FORGET and receipt:
        await _edit(query.message, texts.forgotten(1), None)  # a receipt for a forgotten memory
        return
    restored = callback_data.action == MemoryAction.RESTORE
    if restored and not await engine.memories(scope, {Status.ARCHIVED}):
        restored = False  # the archive is empty now: the main list, where the restored memory is back
    text, markup = await _page(engine, scope, callback_data.page, "", restored, now)
    await _edit(query.message, f"{note}\n\n{text}", markup)


async def on_undo(query: CallbackQuery, callback_data: UndoCB, engine: MemoryEngine) -> None:
    """A receipt's undo: the memory gets back the words the save replaced."""
    scope = scope_of_callback(query)
    if scope is None or not isinstance(query.message, Message):
        await query.answer()
        return
    try:
        memory = await engine.undo_rewording(scope, callback_data.handle, utcnow(), callback_data.earlier)
    except NotYourMemoryError:
        await query.answer(texts.NOT_YOURS, show_alert=True)
        return
    except (MemoryNotFoundError, NothingToUndoError):
        await query.answer(texts.NOTHING_TO_UNDO, show_alert=True)
        return
    await query.answer("已撤销")
    await _edit(query.message, texts.undone(memory), keyboards.receipt(memory))


# ---- /forget ---------------------------------------------------------------------------------------

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
    await message.answer(text, reply_markup=markup)


async def pressed_scope(query: CallbackQuery, data: ForgetCB | ReviewCB, groups: GroupSettings) -> Scope | None:
    """The scope a press acts on: a group-scoped button (sent to a private chat) names it (under the
    group's current id) and counts only for its own user; any other button acts on the presser's scope in
    the chat where it was pressed."""
    if isinstance(data, GroupForgetCB | GroupReviewCB):
        return Scope(data.user, await groups.current_id(data.chat)) if query.from_user.id == data.user else None
    return scope_of_callback(query)


async def forget_here(chat: ChatService, rooms: Rooms, scope: Scope, memories: Sequence[Memory] | None) -> int:
    """Forget (everything with ``None``), and drop what the group's room still shows of it: the member's
    lines that tell it, or every line about them (the room is in-process context the handlers keep)."""
    count = await chat.forget(scope, None if memories is None else [m.id for m in memories])
    rooms.forget(scope, memories)
    return count


async def on_forget(query: CallbackQuery, callback_data: ForgetCB, engine: MemoryEngine, chat: ChatService,
                    groups: GroupSettings, rooms: Rooms, buffer: Buffering) -> None:
    scope = await pressed_scope(query, callback_data, groups)
    if scope is None or not isinstance(query.message, Message):
        await query.answer(texts.NOT_YOURS if isinstance(callback_data, GroupForgetCB) else None)
        return
    if callback_data.action == ForgetAction.CANCEL:
        await _edit(query.message, texts.CANCELLED, None)
        await query.answer()
        return
    if callback_data.action == ForgetAction.ALL:
        buffer.take(scope)  # said before the press and not answered yet: it goes with the rest
        count = await forget_here(chat, rooms, scope, None)
        await _edit(query.message, texts.forgot_all(count), None)
        await query.answer()
        return
    try:
        memory = await engine.get(scope, callback_data.handle)
    except NotYourMemoryError:
        await query.answer(texts.NOT_YOURS, show_alert=True)
        return
    except MemoryNotFoundError:
        await query.answer(texts.MEMORY_GONE, show_alert=True)
        return
    count = await forget_here(chat, rooms, scope, [memory])
    await query.answer(texts.forgotten(count))
    # The choice is made: the buttons go, as after 取消 (a second press would only find nothing to forget).
    await _edit(query.message, f"{query.message.text or ''}\n\n{texts.forgotten(count)}", None)


# ---- /why, /stats, /reset, /weekly, /start ---------------------------------------------------------

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
    on = (command.args or "").strip().lower() not in {"off", "关", "关闭", "0"}
    await set_weekly(engine, scope, on)
    await message.answer(texts.WEEKLY_ON if on else texts.WEEKLY_OFF)


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


# ---- reviews -----------------------------------------------------------------------------------------

async def send_review(bot: Bot, chat_id: int, items: Sequence[tuple[Memory, Suggestion]], scope: Scope | None = None,
                      header: str = "") -> None:
    """The review message: every memory due, with its suggestion and buttons (naming ``scope`` when the
    review of a group's memories goes to the private chat)."""
    markup = keyboards.review(items, scope)
    await bot.send_message(chat_id, f"{header}{texts.review_message(items)}", reply_markup=markup)


async def group_header(bot: Bot, chat_id: int) -> str:
    """「group title」 over a group's memories shown in a private chat."""
    try:
        title = (await bot.get_chat(chat_id)).title
    except TelegramAPIError as exc:
        log.info("title of group %s unavailable: %s", chat_id, exc)
        title = None
    return f"「{title or gt.SOME_GROUP}」\n"


Blocked = Callable[[Scope], Awaitable[None]]


def proactive_senders(bot: Bot, blocked: Blocked) -> tuple[ReviewSender, WeeklySender]:
    """The review and weekly senders the scheduler calls; False when the user cannot be reached. A group's
    memories go to the user's private chat, never to the group; a user who never opened a private chat
    is skipped (and stays due). A user who blocked the bot (403 in their private chat, for their private
    memories) is handed to ``blocked``, which switches companion mode off for them."""

    async def forbidden(scope: Scope, exc: TelegramForbiddenError) -> None:
        if scope.chat_id is None:
            await blocked(scope)
        else:  # no private chat with this group member: their group's companion mode stays as it is
            log.info("proactive message for %s not delivered: %s", scope.key, exc)

    async def delivered(scope: Scope, what: str, send: Callable[[str], Awaitable[object]]) -> bool:
        try:
            header = "" if scope.chat_id is None else await group_header(bot, scope.chat_id)
            await send(header)
        except TelegramForbiddenError as exc:
            await forbidden(scope, exc)
            return False
        except TelegramAPIError as exc:
            log.info("%s for %s not delivered: %s", what, scope.key, exc)
            return False
        return True

    async def review(scope: Scope, items: Sequence[tuple[Memory, Suggestion]]) -> bool:
        async def send(header: str) -> None:
            await send_review(bot, scope.user_id, items, scope, header)

        return await delivered(scope, "review", send)

    async def weekly(scope: Scope, week: WeekSummary) -> bool:
        text = texts.weekly(week.learned, week.promoted, week.archived, week.evicted)

        async def send(header: str) -> None:
            await bot.send_message(scope.user_id, header + text)

        return await delivered(scope, "weekly summary", send)

    return review, weekly


async def on_review(query: CallbackQuery, callback_data: ReviewCB, engine: MemoryEngine, chat: ChatService,
                    groups: GroupSettings, rooms: Rooms) -> None:
    scope = await pressed_scope(query, callback_data, groups)
    if scope is None or not isinstance(query.message, Message):
        await query.answer(texts.NOT_YOURS if isinstance(callback_data, GroupReviewCB) else None)
        return
    now = utcnow()
    try:
        before = await engine.get(scope, callback_data.handle)
        if callback_data.action == REVIEW_UNDO:
            await _undo(engine, scope, before, callback_data, now)
            await query.answer("已撤销")
            await _edit(query.message, f"{query.message.text or ''}\n已撤销：{before.event}", None)
            return
        action = Action(callback_data.action)
        if action is Action.FORGET:
            await forget_here(chat, rooms, scope, [before])
            after = before
        else:
            after = await engine.review(scope, before.id, action, now)
    except NotYourMemoryError:
        await query.answer(texts.NOT_YOURS, show_alert=True)
        return
    except (MemoryNotFoundError, ValueError):
        await query.answer(texts.MEMORY_GONE, show_alert=True)
        return
    await query.answer()
    done = texts.review_done(after, action)
    undo = None
    if action is not Action.FORGET and not isinstance(callback_data, GroupReviewCB):  # forgetting is final
        undo = keyboards.undo(ReviewCB(action=REVIEW_UNDO, handle=before.id, at=int(time.time()),
                                       tier=before.tier.value,
                                       review=int(before.review_at.timestamp()) if before.review_at else 0,
                                       was=action.value))
    await _edit(query.message, f"{query.message.text or ''}\n✔ {done}", undo)


async def _undo(engine: MemoryEngine, scope: Scope, memory: Memory, data: ReviewCB, now: datetime) -> None:
    if time.time() - data.at > UNDO_SECONDS:
        raise ValueError("undo window passed")
    if data.was == Action.ARCHIVE.value:
        await engine.restore(scope, memory.id, now)
    elif data.was == Action.PROMOTE.value:
        await engine.move(scope, memory.id, Tier(data.tier), now)
    if data.review:
        await engine.set_review(scope, memory.id, datetime.fromtimestamp(data.review, tz=now.tzinfo))


async def _edit(message: Message, text: str, markup: InlineKeyboardMarkup | None) -> None:
    for part in texts.split_message(text)[:1]:
        if part != message.text or markup != message.reply_markup:
            await message.edit_text(part, reply_markup=markup)


def build() -> Router:
    router = Router(name="memories")
    router.message.register(list_memories, command(Place.PRIVATE, "memories"))
    router.message.register(forget_command, command(Place.PRIVATE, "forget"))
    router.message.register(why_command, command(Place.PRIVATE, "why"))
    router.message.register(stats_command, command(Place.PRIVATE, "stats"))
    router.message.register(reset_command, command(Place.PRIVATE, "reset"))
    router.message.register(weekly_command, command(Place.PRIVATE, "weekly"))
    router.message.register(start_command, command(Place.PRIVATE, "start"))
    router.callback_query.register(on_memory_button, MemoryCB.filter())
    router.callback_query.register(on_undo, UndoCB.filter())
    router.callback_query.register(on_page, PageCB.filter())
    router.callback_query.register(on_forget, ForgetCB.filter())
    router.callback_query.register(on_forget, GroupForgetCB.filter())
    router.callback_query.register(on_review, ReviewCB.filter())
    router.callback_query.register(on_review, GroupReviewCB.filter())
    router.callback_query.register(on_start_button, StartCB.filter(F.action == StartAction.ON))
    return router
