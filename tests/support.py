"""Fixtures for pipeline tests: a real engine on a temporary SQLite file, the real LLM client against
FakeLLM, and the chat service on top. The fixtures built from them live in ``conftest.py``."""

from __future__ import annotations

import inspect
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from companion.chat.buffer import MessageBuffer
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.config.settings import Settings
from companion.llm.client import LLMClient
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore, spares
from memory import MemoryEngine
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.telegram import JSONDict

_EXTRACTOR = KeywordExtractor()


class CountingStore:
    """Every awaited call of the store it wraps, by name."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await cast(Callable[..., Awaitable[Any]], attr)(*args, **kwargs)

        return counted


def table_of(conn: sqlite3.Connection, key: str) -> str | None:
    """A registered scope's memory table as the file records it (it may have taken a spare), or None."""
    row = conn.execute("SELECT table_id FROM scopes WHERE key = ?", (key,)).fetchone()
    return None if row is None else spares.table_name(key, row[0])


@dataclass
class Clock:
    """A settable clock so tests decide what "now" is."""

    now: datetime = field(default_factory=lambda: datetime(2025, 12, 23, 2, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Rig:
    llm: FakeLLM
    client: LLMClient
    engine: MemoryEngine
    chat: ChatService
    clock: Clock
    settings: Settings
    store: SQLiteStore


def make_settings(tmp: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"data_dir": tmp / "data", "backup_dir": tmp / "backups"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[arg-type,call-arg]


async def open_rig(llm: FakeLLM, settings: Settings, clock: Clock | None = None, seed: int = 1) -> Rig:
    clock = clock or Clock()
    client = LLMClient(api_key="sk-test", base_url=llm.base_url, model="deepseek-chat", max_retries=0, timeout=5)
    store = await SQLiteStore.open(settings.db_path)
    engine = await engine_on(store, settings, _EXTRACTOR, client)
    chat = ChatService(engine, client, ChatConfig.from_settings(settings), clock=clock, rng=random.Random(seed))
    await chat.load()
    return Rig(llm, client, engine, chat, clock, settings, store)


async def close_rig(rig: Rig) -> None:
    await rig.chat.drain()
    await rig.engine.close()
    await rig.store.close()
    await rig.client.close()


USER = 4242


@dataclass
class Live:
    tg: FakeTelegram
    llm: FakeLLM
    rig: Rig
    buffer: MessageBuffer

    async def say(self, text: str, expect_total: int, user: int = USER) -> str:
        """Send as ``user`` and wait until the bot has sent that user ``expect_total`` messages in all."""
        self.tg.push_text(user, text)
        sent = await self.tg.wait_for_messages(user, expect_total, timeout=10)
        return str(sent[-1]["text"])

    @asynccontextmanager
    async def bot(self) -> AsyncIterator[Bot]:
        """A second client on the fake server, for what the bot sends on its own (reviews)."""
        bot = Bot(self.tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(self.tg.base_url)))
        try:
            yield bot
        finally:
            await bot.session.close()

    async def press(self, user: int, message: JSONDict, label: str, expect_answers: int) -> None:
        """Press the button whose text contains ``label`` on a message the bot sent."""
        data = next(d for text, d in self.tg.buttons(message) if label in text)
        self.tg.push_callback(user, int(message["message_id"]), data, chat_id=int(message["chat_id"]))
        await self.tg.wait_for_callback_answers(expect_answers)


def vectors_in(db: Path) -> int:
    """How many memory vectors a SQLite database holds."""
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT count(*) FROM memory_vectors").fetchone()[0])
    finally:
        conn.close()
