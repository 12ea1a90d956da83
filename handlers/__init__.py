"""Thin aiogram routers. They translate Telegram updates to ChatService calls and nothing more."""

from __future__ import annotations

from aiogram import Router

from handlers import admin, chat, commands, errors, memories
from handlers.order import PerUserOrder


def build_router() -> Router:
    root = Router(name="root")
    root.message.outer_middleware(PerUserOrder())
    root.include_routers(commands.build(), admin.build(), memories.build(), chat.build(), errors.build())
    return root
