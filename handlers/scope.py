"""Which memory scope an update belongs to."""

from __future__ import annotations

from aiogram.types import Message

from companion.core.models import Scope


def scope_of(message: Message) -> Scope | None:
    """Private chats map to the user's own scope; a group message to (group, user), never the user's
    private memories."""
    if message.from_user is None or message.from_user.is_bot:
        return None
    if message.chat.type == "private":
        return Scope(message.from_user.id)
    return Scope(message.from_user.id, message.chat.id)
