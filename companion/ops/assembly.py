"""The engine assembled from settings: the store, the engine on it and the LLM client, opened and closed
together; the bot (``bot.py``) and the operator commands (``commands``) share it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from companion.config.settings import Settings
    from companion.llm.client import LLMClient
    from companion.ops.admin import AdminService, Forget
    from companion.storage.sqlite import SQLiteStore
    from memory import MemoryEngine


def build_llm(settings: Settings) -> LLMClient:
    from companion.llm.client import LLMClient

    settings.require("llm_api_key")
    assert settings.llm_api_key is not None
    return LLMClient(
        api_key=settings.llm_api_key.get_secret_value(), base_url=settings.llm_base_url,
        model=settings.llm_model, timeout=settings.llm_timeout_seconds, max_retries=settings.llm_max_retries,
    )


@dataclass(frozen=True, slots=True)
class Services:
    store: SQLiteStore
    engine: MemoryEngine
    llm: LLMClient | None


@asynccontextmanager
async def services(settings: Settings, *, need_llm: bool) -> AsyncIterator[Services]:
    """The store, the engine on it and, when needed or configured, the LLM client; closed in reverse order."""
    from companion.ops.admin import usage_sink
    from companion.recall.keywords import KeywordExtractor
    from companion.storage.sqlite import SQLiteStore
    from companion.storage.usage import UsageLog
    from memory import MemoryEngine

    llm = build_llm(settings) if need_llm or settings.llm_api_key is not None else None
    keywords = KeywordExtractor()
    if need_llm:
        keywords.preload()  # the chat needs the dictionaries: load them while the database opens
    try:
        store = await SQLiteStore.open(settings.db_path)
        try:
            if llm is not None:
                llm.usage_sink = usage_sink(UsageLog(store))  # every call's tokens and latency, one table
            engine = await MemoryEngine.create(store, settings, keywords, llm)
            try:
                yield Services(store, engine, llm)
            finally:
                await engine.close()  # the dense retriever's backend and vector connection
        finally:
            await store.close()
    finally:
        if llm is not None:
            await llm.close()


def admin_service(settings: Settings, parts: Services, forget: Forget | None = None) -> AdminService:
    """``forget``: the chat's forgetting (it also clears the short-term context), when a chat runs."""
    from companion.ops.admin import AdminService
    from companion.storage.usage import UsageLog

    return AdminService(parts.engine, parts.store, UsageLog(parts.store), settings.tz, forget=forget)
