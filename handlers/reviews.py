"""Reviews in Telegram: the review and weekly-summary messages the scheduler sends (a group's memories
to the member's private chat, never to the group), and the review buttons with their one-minute undo,
which the engine does (``MemoryEngine.undo_review``); this module only translates."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from aiogram import Bot, Router
from aiogram.exceptions import TelegramAPIError, TelegramForbiddenError
from aiogram.types import CallbackQuery, Message

from companion.chat import group_texts as gt
from companion.chat import texts
from companion.chat.followup_round import FollowUpSender
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.core.errors import MemoryNotFoundError, NothingToUndoError, NotYourMemoryError
from companion.core.models import Memory, Scope, Tier
from companion.core.tiers import Action, Suggestion
from companion.core.timeutil import utcnow
from companion.ops.jobs.proactive import ReviewSender, WeeklySender, WeekSummary
from handlers import keyboards
from handlers.delivery import edit_shown
from handlers.forgetting import forget_here, pressed_scope
from handlers.keyboards import REVIEW_UNDO, GroupReviewCB, ReviewCB
from memory import MemoryEngine

log = logging.getLogger(__name__)


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


def followup_sender(bot: Bot, blocked: Blocked) -> FollowUpSender:
    """The follow-up sender the scheduler's round calls: the message with its "别再提" button, to the user's
    private chat (follow-ups are about private memories only); a user who blocked the bot is handed to
    ``blocked``. False when it was not delivered."""

    async def send(scope: Scope, handle: int, text: str) -> bool:
        try:
            await bot.send_message(scope.user_id, text, reply_markup=keyboards.followup(handle))
        except TelegramForbiddenError:
            await blocked(scope)
            return False
        except TelegramAPIError as exc:
            log.info("follow-up for %s not delivered: %s", scope.key, exc)
            return False
        return True

    return send


async def on_review(query: CallbackQuery, callback_data: ReviewCB, engine: MemoryEngine, chat: ChatService,
                    groups: GroupSettings) -> None:
    scope = await pressed_scope(query, callback_data, groups)
    if scope is None or not isinstance(query.message, Message):
        await query.answer(texts.NOT_YOURS if isinstance(callback_data, GroupReviewCB) else None)
        return
    now = utcnow()
    try:
        before = await engine.get(scope, callback_data.handle)
        if callback_data.action == REVIEW_UNDO:
            data = callback_data
            await engine.undo_review(scope, before.id, Action(data.was), now,
                                     done_at=datetime.fromtimestamp(data.at, UTC),
                                     tier=Tier(data.tier) if data.tier else None,  # "" and 0: nothing to put back
                                     review_at=datetime.fromtimestamp(data.review, UTC) if data.review else None)
            await query.answer("已撤销")
            await edit_shown(query.message, f"{query.message.text or ''}\n已撤销：{before.shown}", None)
            return
        action = Action(callback_data.action)
        if action is Action.FORGET:
            await forget_here(chat, scope, [before])
            after = before
        else:
            after = await engine.review(scope, before.id, action, now)
    except NotYourMemoryError:
        await query.answer(texts.NOT_YOURS, show_alert=True)
        return
    except (MemoryNotFoundError, NothingToUndoError, ValueError):
        await query.answer(texts.MEMORY_GONE, show_alert=True)
        return
    await query.answer()
    done = texts.review_done(after, action)
    undo = None
    if action is not Action.FORGET and not isinstance(callback_data, GroupReviewCB):  # forgetting is final
        undo = keyboards.undo(ReviewCB(action=REVIEW_UNDO, handle=before.id, at=int(now.timestamp()),
                                       tier=before.tier.value,
                                       review=int(before.review_at.timestamp()) if before.review_at else 0,
                                       was=action.value))
    await edit_shown(query.message, f"{query.message.text or ''}\n✔ {done}", undo)


def build() -> Router:
    router = Router(name="reviews")
    router.callback_query.register(on_review, ReviewCB.filter())
    router.callback_query.register(on_review, GroupReviewCB.filter())
    return router
