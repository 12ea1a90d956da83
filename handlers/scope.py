"""Which memory scope an update belongs to, and the alert for a button outside it."""

from __future__ import annotations

from aiogram.types import CallbackQuery, Message

from companion.chat import texts
from companion.core.errors import CompanionError, NotYourMemoryError
from companion.core.models import Scope


def scope_of(message: Message) -> Scope | None:
    """Private chats map to the user's own scope; a group message to (group, user), never the user's
    private memories. A sender that is a chat (an anonymous admin, a channel) has no scope: its ``from``
    is a placeholder account shared by everyone who posts that way."""
    if message.from_user is None or message.from_user.is_bot or message.sender_chat is not None:
        return None
    if message.chat.type == "private":
        return Scope(message.from_user.id)
    return Scope(message.from_user.id, message.chat.id)


def scope_of_callback(query: CallbackQuery) -> Scope | None:
    """The presser's own scope in the chat where the button was pressed (never the sender of the message)."""
    if query.from_user.is_bot or query.message is None:
        return None
    chat = query.message.chat
    return Scope(query.from_user.id) if chat.type == "private" else Scope(query.from_user.id, chat.id)


async def refuse(query: CallbackQuery, error: CompanionError, gone: str = texts.MEMORY_GONE) -> None:
    """The alert for a button on a memory that is not the presser's (another scope's handle), or for one
    whose action can no longer be done (``gone``: the memory went, or there is nothing to undo)."""
    await query.answer(texts.NOT_YOURS if isinstance(error, NotYourMemoryError) else gone, show_alert=True)
