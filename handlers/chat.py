"""Text messages in companion mode: buffer, then one reply per quiet period."""

from __future__ import annotations

import logging

from aiogram import Bot, F, Router
from aiogram.types import Message, ReplyParameters

from companion.chat import group_texts as gt
from companion.chat import texts
from companion.chat.buffer import Buffering
from companion.chat.group import GroupTurn
from companion.chat.pipeline import ChatService
from companion.core.errors import CompanionError
from companion.core.models import Scope
from handlers import keyboards
from handlers.delivery import deliver, kept_if_abandoned, switch_off_blocked, typing
from handlers.filters import CAPTION, IN_PRIVATE, PREFIX, TEXT, Inline
from handlers.group_private import titled, to_private
from handlers.scope import scope_of

log = logging.getLogger(__name__)


async def on_text(message: Message, bot: Bot, chat: ChatService, buffer: Buffering) -> None:
    scope = scope_of(message)
    said = message.text if message.text is not None else message.caption  # a photo's caption is text too
    if scope is None or said is None:
        return
    if not await chat.active(scope):
        if await chat.hints.allow(scope):  # one hint per person per HINT_EVERY, not one per message
            await message.answer(texts.NOT_STARTED)
        return
    chat_id, message_id = message.chat.id, message.message_id

    async def flush(text: str) -> None:
        await answer_turn(bot, chat, buffer, scope, chat_id, text, message_id)

    buffer.push(scope, said, flush)


async def answer_turn(
    bot: Bot, chat: ChatService, buffer: Buffering, scope: Scope, chat_id: int, text: str,
    message_id: int | None = None, group: GroupTurn | None = None,
) -> str:
    """Answer one turn and return what was sent; in a group, as a reply to the addressing message."""
    markup = None
    try:
        async with typing(bot, chat_id), kept_if_abandoned(chat, scope, text,
                                                           remember=None if group is not None else True):
            reply = await chat.reply(scope, text, chat_id=chat_id, message_id=message_id, group=group)
        answer = reply.text
        if reply.saved is not None:
            markup = keyboards.receipt(reply.saved, reply.replaced)
        elif reply.to_forget and group is not None:
            # "忘掉我说的…" in a group: the matches are listed privately, the buttons naming this group's scope.
            sent = await to_private(bot, scope.user_id, titled(group.title, answer),
                                    keyboards.forget_choices(reply.to_forget, scope))
            answer = gt.SENT_PRIVATELY if sent else gt.START_PRIVATE_FIRST
        elif reply.to_forget:
            markup = keyboards.forget_choices(reply.to_forget)
        elif reply.forget_all is not None and group is not None:
            sent = await to_private(bot, scope.user_id, titled(group.title, answer),
                                    keyboards.forget_all(reply.forget_all, scope))
            answer = gt.SENT_PRIVATELY if sent else gt.START_PRIVATE_FIRST
        elif reply.forget_all is not None:
            markup = keyboards.forget_all(reply.forget_all)
    except CompanionError:
        # Runs in the buffer's task, outside aiogram's error handler: answer here, log the traceback.
        log.exception("turn for %s failed", scope.key)
        answer = texts.INTERNAL_ERROR
    to = None if group is None or message_id is None else ReplyParameters(message_id=message_id,
                                                                           allow_sending_without_reply=True)
    if not await deliver(bot, chat_id, answer, markup, reply_to=to):
        await switch_off_blocked(chat, buffer, scope)
    return answer


async def on_unknown_command(message: Message) -> None:
    await message.answer(texts.help_text())


async def on_other(message: Message) -> None:
    """Stickers, photos, voice and the rest: a friendly word instead of silence or a crash."""
    await message.answer(texts.NON_TEXT)


def conversation(message: Message) -> bool:
    """A text or caption no command can take: aiogram's ``Command`` splits the text on whitespace and reads
    the first character as the prefix, and every command here has the prefix ``PREFIX``."""
    said = message.text or message.caption
    return said is not None and said != "" and said.lstrip()[:1] != PREFIX


def build_conversation() -> Router:
    """Private talk, ahead of the groups and command routers: most updates are this, and none of those
    routers could take it (``tests/test_handlers.py`` holds every one of their filters to that), so it skips
    their checks."""
    router = Router(name="conversation")
    router.message.filter(IN_PRIVATE)
    router.message.register(on_text, Inline(conversation))
    return router


def build() -> Router:
    """The last private router: talk the conversation router did not take (a text with a leading space
    before its "/"), unknown commands, and everything that is not text."""
    router = Router(name="chat")
    router.message.filter(IN_PRIVATE)
    router.message.register(on_text, TEXT)
    router.message.register(on_text, CAPTION)
    router.message.register(on_unknown_command, Inline(F.text.startswith(PREFIX)))
    router.message.register(on_other)
    return router
