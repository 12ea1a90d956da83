"""Thin aiogram routers. They translate Telegram updates to ChatService calls and nothing more."""

from __future__ import annotations

from aiogram import Router

from handlers import admin, chat, commands, errors, memories


def build_router() -> Router:
    root = Router(name="root")
    root.include_routers(commands.build(), admin.build(), memories.build(), chat.build(), errors.build())
    return root
