"""The engine assembled from settings: the store, the engine on it and the LLM client, opened and closed
together; the bot (``bot.py``) and the operator commands (``operator_commands``) share it. The one place the bot's
``Settings`` become the engine's parts (``engine_config``, ``build_embedder``): the engine itself knows
no settings. The one module of ``companion.ops`` that holds the store: it builds it aside, as ``bot.py`` does,
and hands the rest of ``ops`` only the engine and its narrow ports (``AdminPort``, ``MaintenancePort``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from companion.config.settings import Settings
    from companion.core.spools import TurnSpools
    from companion.engine.maintenance_port import MaintenancePort
    from companion.llm.client import LLMClient
    from companion.llm.embeddings import Embedder
    from companion.ops.admin.admin_service import AdminService, Forget
    from companion.recall.keywords import KeywordExtractor
    from companion.storage.base import MemoryStore
    from memory import EngineConfig, MemoryEngine

# A write may wait on its embedding call (a saved or edited memory): one retry, not the SDK's default two.
WRITE_RETRIES = 1


def build_llm(settings: Settings) -> LLMClient:
    from companion.llm.client import LLMClient

    settings.require_for_chat(telegram=False)
    return LLMClient(
        api_key=settings.llm_key, base_url=settings.llm_base_url,
        model=settings.llm_model, timeout=settings.llm_timeout_seconds, max_retries=settings.llm_max_retries,
    )


def engine_config(settings: Settings) -> EngineConfig:
    from datetime import timedelta

    from companion.engine.cache import memories_for
    from companion.engine.profile import ProfilePolicy
    from companion.engine.retrievers import DensePolicy
    from memory import EngineConfig

    return EngineConfig(
        recall_max=settings.recall_max,
        recall_min_importance=settings.recall_min_importance,
        recall_min_match=settings.recall_min_match,
        recall_cooldown_turns=settings.recall_cooldown_turns,
        extract_max_turns=settings.extract_max_turns,
        capacity=settings.memory_capacity,
        tz=settings.tz,
        profile=ProfilePolicy(
            ttl=timedelta(hours=settings.profile_ttl_hours),
            min_refresh=timedelta(minutes=settings.profile_refresh_min_minutes),
            min_importance=settings.profile_min_importance,
        ),
        important_keywords=tuple(settings.important_keywords),
        cache_memories=memories_for(settings.index_cache_mb),
        dense=DensePolicy(min_similarity=settings.embedding_min_similarity,
                          min_standout=settings.embedding_min_standout,
                          floor_decides_small_scopes=settings.embedding_backend != "e5",
                          retry_after=settings.embedding_retry_after_seconds),
    )


def build_embedder(settings: Settings) -> Embedder | None:
    """The configured backend, or None when semantic recall is off (or its in-process model is not installed
    here, said in one line). Loads nothing yet."""
    from companion.llm.embeddings import LocalEmbedder, OpenAIEmbedder, builtin_embedder

    if settings.embedding_backend == "openai":
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else ""
        return OpenAIEmbedder(
            base_url=settings.embedding_base_url, model=settings.embedding_model, api_key=key,
            dimensions=settings.embedding_dimensions, batch_size=settings.embedding_batch_size,
            timeout=settings.embedding_timeout_seconds, query_timeout=settings.embedding_query_timeout_seconds,
            max_retries=WRITE_RETRIES,
        )
    if settings.embedding_backend == "local":
        return LocalEmbedder(settings.embedding_local_model, batch_size=settings.embedding_batch_size)
    if settings.embedding_backend == "e5":
        return builtin_embedder("here")
    return None


async def engine_on(
    store: MemoryStore, settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None
) -> MemoryEngine:
    """The engine the settings describe, on an open store (the caller closes both)."""
    from memory import MemoryEngine

    return await MemoryEngine.create(store, engine_config(settings), keywords, llm, embedder=build_embedder(settings))


async def open_engine(settings: Settings, keywords: KeywordExtractor, llm: LLMClient | None = None) -> MemoryEngine:
    """The store the settings name and an engine that owns it (closed with it)."""
    from memory import MemoryEngine

    return await MemoryEngine.open(settings.database, engine_config(settings), keywords, llm,
                                   embedder=build_embedder(settings))


@dataclass(frozen=True, slots=True)
class Services:
    store: MemoryStore
    engine: MemoryEngine
    llm: LLMClient | None
    spools: TurnSpools
    maintenance: MaintenancePort  # the backup, the table upgrade: the store's whole-database door


@asynccontextmanager
async def services(settings: Settings, *, need_llm: bool) -> AsyncIterator[Services]:
    """The store, the engine on it and, when needed or configured, the LLM client; closed in reverse order."""
    from companion.engine.maintenance_port import MaintenancePort
    from companion.recall.keywords import KeywordExtractor
    from companion.storage.factory import open_spools, open_store

    llm = build_llm(settings) if need_llm or settings.llm_api_key is not None else None
    keywords = KeywordExtractor()
    if need_llm:
        keywords.preload()  # the chat needs the dictionaries: load them while the database opens
    try:
        store = await open_store(settings.database)
        try:
            usage = store.usage_log()
            if llm is not None and usage is not None:
                llm.usage_sinks.append(usage.add)  # every call's tokens and latency, one row after its answer
            engine = await engine_on(store, settings, keywords, llm)
            spools = open_spools(settings.spool_dir)
            try:
                yield Services(store, engine, llm, spools, MaintenancePort(store))
            finally:
                spools.close()
                await engine.close()  # the dense retriever's backend and vector connection
        finally:
            await store.close()
    finally:
        if llm is not None:
            await llm.close()


def admin_service(settings: Settings, parts: Services, forget: Forget | None = None) -> AdminService:
    """``forget``: the chat's forgetting (it also clears the short-term context), when a chat runs."""
    from companion.engine.admin_port import AdminPort
    from companion.ops.admin.admin_service import AdminService

    reads = AdminPort(parts.store, parts.store.usage_log())
    return AdminService(parts.engine, reads, settings.tz, forget=forget, spools=parts.spools)
