"""A bot wired as ``bot.py`` wires it (groups included), against the fake Telegram and LLM servers, with
updates delivered one at a time through the dispatcher so a test knows when each one is fully handled."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from pydantic import Field

from companion.chat.buffer import MessageBuffer
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.config.settings import Settings
from companion.core.models import MemoryDraft, MemoryType, Scope, Tier, Validity
from companion.core.timeutil import utcnow
from companion.llm.client import LLMClient
from companion.llm.toolkit import Tool, ToolFactory
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.factory import open_store
from handlers import build_dispatcher
from handlers.commands import bot_commands
from handlers.groups import set_menus
from memory import MemoryEngine
from tests.fakes import FakeLLM, FakeTelegram
from tests.support import make_settings

EXTRACTOR = KeywordExtractor()
BOT = "companion_bot"
Query = Annotated[str, Field(min_length=1, max_length=40)]


def search_tool(engine: MemoryEngine) -> ToolFactory:
    """A memory tool bound to the caller's scope, as the real tools are (companion.llm.toolkit)."""

    def build(scope: Scope) -> list[Tool]:
        async def search_memories(query: Query) -> list[str]:
            """Search what you remember about the user.

            Args:
                query: words to look for.
            """
            return [m.event for m in await engine.search(scope, query, utcnow(), limit=5)]

        return [Tool.function(search_memories)]

    return build


@dataclass
class GroupBot:
    tg: FakeTelegram
    llm: FakeLLM
    bot: Bot
    dispatcher: Dispatcher
    chat: ChatService
    engine: MemoryEngine
    buffer: MessageBuffer
    settings: Settings
    offset: int = 0
    handled: list[int] = field(default_factory=list)

    async def deliver(self) -> None:
        """Feed every queued update to the dispatcher, flush the buffered turns and wait for the
        background work they start (extraction, profile rebuilds)."""
        for update in await self.bot.get_updates(offset=self.offset, timeout=0):
            self.offset = update.update_id + 1
            await self.dispatcher.feed_update(self.bot, update)
            self.handled.append(update.update_id)
        await self.buffer.close()
        await self.chat.drain()

    async def group(self, user: int, chat_id: int, text: str, **kwargs: object) -> None:
        self.tg.push_group_text(user, chat_id, text, **kwargs)  # type: ignore[arg-type]
        await self.deliver()

    async def private(self, user: int, text: str) -> None:
        self.tg.push_text(user, text)
        await self.deliver()

    async def seed(self, scope: Scope, event: str, keywords: list[str],
                   kind: MemoryType = MemoryType.FACT) -> int:
        draft = MemoryDraft(event=event, keywords=keywords, importance=80.0, validity=Validity.PERMANENT, type=kind,
                            tier=Tier.MEDIUM)
        [handle, *_] = await self.engine.remember(scope, [draft], utcnow())
        return handle


@asynccontextmanager
async def group_bot(tmp: Path, *, tools: bool = False, memory_tools_on: bool = False,
                    **overrides: object) -> AsyncIterator[GroupBot]:
    """``tools``: the one search tool above; ``memory_tools_on``: the bot's real memory tools."""
    values: dict[str, object] = {"quiet_seconds": 0.0, "llm_tools_enabled": tools or memory_tools_on}
    values.update(overrides)
    settings = make_settings(tmp, **values)
    async with FakeTelegram(bot_username=BOT) as tg, FakeLLM() as llm:
        store = await open_store(settings.database)  # DATABASE_URL in ``overrides`` picks another backend
        client = LLMClient(api_key="sk-test", base_url=llm.base_url, model="deepseek-chat", max_retries=0, timeout=5)
        engine = await engine_on(store, settings, EXTRACTOR, client)
        factory = engine.tools() if memory_tools_on else search_tool(engine) if tools else None
        chat = ChatService(engine, client, ChatConfig.from_settings(settings), rng=random.Random(1), tools=factory)
        await chat.load()
        buffer = MessageBuffer(settings.quiet_seconds)
        bot = Bot(tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url)))
        dispatcher = build_dispatcher(chat, buffer, settings, GroupSettings(engine))
        await set_menus(bot, bot_commands())
        try:
            yield GroupBot(tg, llm, bot, dispatcher, chat, engine, buffer, settings)
        finally:
            await buffer.close()
            await chat.drain()
            await bot.session.close()
            await store.close()
            await client.close()
