"""A fake OpenAI-compatible embeddings server on 127.0.0.1 for the real openai SDK.

Vectors are deterministic and meaningful enough to test ranking: hashed character unigrams and bigrams
(signed feature hashing), L2-normalised, so texts sharing characters are close and unrelated texts are
nearly orthogonal. ``synonyms`` rewrites words before hashing, standing in for what a real model knows
("狗狗" means "小狗"). Failures, delays and a per-request observer script the error paths.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import math
import struct
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from .base import FakeServer

DIM = 1024
UNIGRAM_WEIGHT = 0.5
BIGRAM_WEIGHT = 1.0


def _bucket(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % dim, (1.0 if value >> 63 else -1.0)


def ngram_vector(text: str, dim: int = DIM, synonyms: Mapping[str, str] | None = None) -> list[float]:
    for word, canonical in (synonyms or {}).items():
        text = text.replace(word, canonical)
    chars = [c for c in text.lower() if c.isalnum()]
    vector = [0.0] * dim
    for gram, weight in [(c, UNIGRAM_WEIGHT) for c in chars] + [
        (a + b, BIGRAM_WEIGHT) for a, b in itertools.pairwise(chars)
    ]:
        index, sign = _bucket(gram, dim)
        vector[index] += sign * weight
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:
        vector[0], norm = 1.0, 1.0
    return [v / norm for v in vector]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


class FakeEmbeddings(FakeServer):
    """``POST /embeddings`` (and ``/v1/embeddings``); pass ``base_url`` to ``AsyncOpenAI``."""

    def __init__(self, *, dim: int = DIM, synonyms: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.dim = dim
        self.synonyms = dict(synonyms or {})
        self.requests: list[dict[str, Any]] = []
        self.observer: Callable[[list[str]], None] | None = None
        self._failures: deque[int] = deque()
        self._delays: deque[float] = deque()

    def vector(self, text: str, dim: int | None = None) -> list[float]:
        return ngram_vector(text, dim or self.dim, self.synonyms)

    @property
    def inputs(self) -> list[str]:
        return [text for request in self.requests for text in request["input"]]

    def fail_next(self, count: int = 1, status: int = 500) -> None:
        self._failures.extend([status] * count)

    def delay_next(self, seconds: float, count: int = 1) -> None:
        self._delays.extend([seconds] * count)

    def _routes(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/embeddings", self._embeddings)

    async def start(self) -> None:
        await super().start()
        self.base_url += "/v1"  # what operators put in EMBEDDING_BASE_URL

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = [body["input"]] if isinstance(body.get("input"), str) else list(body.get("input") or [])
        self.requests.append({**body, "input": texts})
        if self.observer is not None:
            self.observer(texts)
        if self._delays:
            await asyncio.sleep(self._delays.popleft())
        if self._failures:
            status = self._failures.popleft()
            return web.json_response({"error": {"message": "fake failure", "type": "server_error"}}, status=status)
        if not texts or any(not isinstance(t, str) or not t for t in texts):
            return web.json_response({"error": {"message": "input must be non-empty strings"}}, status=400)
        dim = int(body.get("dimensions") or self.dim)
        data = []
        for index, text in enumerate(texts):
            vector = self.vector(text, dim)
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(t) for t in texts)
        return web.json_response({
            "object": "list", "data": data, "model": body.get("model", "fake"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })
