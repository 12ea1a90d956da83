"""Thin aiogram routers. They translate Telegram updates to ChatService calls and nothing more."""

from __future__ import annotations

from aiogram import Bot, Dispatcher, Router
from aiogram.client.telegram import TelegramAPIServer

from companion.chat.buffer import Buffering
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.config.settings import Settings
from companion.ops.admin.admin_service import AdminService
from handlers import (
    admin,
    board,
    chat,
    commands,
    dida,
    error_handler,
    forgetting,
    groups,
    memory_list,
    reviews,
    user_commands,
)
from handlers.cleaning import KnownUpdates, SendableText
from handlers.client_session import POLL_PACE_SECONDS, JsonSession, PacedPolling
from handlers.delivery import KeptResponseTypes, RetryAfterMiddleware
from handlers.order import NoState, UserOrder


def build_router() -> Router:
    root = Router(name="root")
    root.message.outer_middleware(SendableText())
    # Private talk first (most updates; it can be neither a command nor a group's message), then the groups:
    # group commands and addressed messages; private chats fall through to the rest.
    root.include_routers(chat.build_conversation(), board.build(), groups.build(), commands.build(), admin.build(),
                         dida.build(),
                         memory_list.build(), forgetting.build(), reviews.build(), user_commands.build(), chat.build(),
                         error_handler.build())
    return root


def build_client(token: str, api_base: str, *, poll_pace: float = POLL_PACE_SECONDS) -> Bot:
    """The Telegram client: aiogram's own, against ``api_base``, sending JSON bodies, waiting out a flood limit
    (429), its response models kept between garbage collections (``KeptResponseTypes``), polling in batches
    under load (``PacedPolling``, ``poll_pace`` seconds)."""
    session = JsonSession(api=TelegramAPIServer.from_base(api_base))
    session.middleware(KeptResponseTypes())
    session.middleware(RetryAfterMiddleware())
    session.middleware(PacedPolling(poll_pace))
    return Bot(token, session=session)


def build_dispatcher(chat: ChatService, buffer: Buffering, settings: Settings, groups: GroupSettings,
                     admin: AdminService | None = None) -> Dispatcher:
    """The dispatcher with every router and what the handlers take by name. Without ``admin`` the
    operators' commands have no service to call (tests that do not exercise them)."""
    # aiogram's FSM middleware runs for its events isolation alone: one user's updates in a chat in the order
    # sent (handlers/order.py); no handler keeps FSM state.
    dispatcher = Dispatcher(chat=chat, buffer=buffer, settings=settings, engine=chat.engine, tz=settings.tz,
                            groups=groups, rooms=chat.rooms, storage=NoState(), events_isolation=UserOrder())
    if admin is not None:
        dispatcher["admin"] = admin
    if settings.webapp_url:  # the memory board: /board and the button on /memories open it
        dispatcher["board_url"] = settings.webapp_url
    dispatcher.update.outer_middleware(KnownUpdates())
    dispatcher.include_router(build_router())
    return dispatcher
