"""Thin aiogram routers. They translate Telegram updates to ChatService calls and nothing more."""

from __future__ import annotations

from aiogram import Router

from handlers import admin, chat, commands, errors, groups, memories
from handlers.cleaning import SendableText
from handlers.order import PerUserOrder


def build_router() -> Router:
    root = Router(name="root")
    root.message.outer_middleware(PerUserOrder())
    root.message.outer_middleware(SendableText())
    # Groups first: group commands and addressed messages; private chats fall through to the rest.
    root.include_routers(groups.build(), commands.build(), admin.build(), memories.build(), chat.build(),
                         errors.build())
    return root
