"""Fixtures for pipeline tests: a real engine on a temporary SQLite file, the real LLM client against
FakeLLM, and the chat service on top. The fixtures built from them live in ``conftest.py``."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from companion.chat.pipeline import ChatConfig, ChatService
from companion.config.settings import Settings
from companion.llm.client import LLMClient
from companion.recall.keywords import KeywordExtractor
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
