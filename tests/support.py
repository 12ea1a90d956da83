"""Fixtures for pipeline tests: a real engine on a temporary SQLite file, the real LLM client against
FakeLLM, and the chat service on top. Import the fixtures into a test module to use them."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from companion.chat import ChatConfig, ChatService
from companion.keywords import KeywordExtractor
from companion.llm import LLMClient
from companion.settings import Settings
from memory import MemoryEngine
from tests.fakes import FakeLLM

_EXTRACTOR = KeywordExtractor()


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


def make_settings(tmp: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {"data_dir": tmp / "data", "backup_dir": tmp / "backups"}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[arg-type,call-arg]


async def open_rig(llm: FakeLLM, settings: Settings, clock: Clock | None = None, seed: int = 1) -> Rig:
    clock = clock or Clock()
    client = LLMClient(api_key="sk-test", base_url=llm.base_url, model="deepseek-chat", max_retries=0, timeout=5)
    engine = await MemoryEngine.open(settings, _EXTRACTOR, client)
    chat = ChatService(engine, client, ChatConfig.from_settings(settings), clock=clock, rng=random.Random(seed))
    await chat.load()
    return Rig(llm, client, engine, chat, clock, settings)


async def close_rig(rig: Rig) -> None:
    await rig.chat.drain()
    await rig.engine.close()
    await rig.client.close()


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        yield llm


@pytest.fixture
async def rig(fake_llm: FakeLLM, tmp_path: Path) -> AsyncIterator[Rig]:
    opened = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        yield opened
    finally:
        await close_rig(opened)
