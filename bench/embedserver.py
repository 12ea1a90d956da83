"""``python -m bench.embedserver MODEL_DIR [--port 8765]``: an OpenAI-compatible ``/v1/embeddings`` endpoint
around a local sentence-transformers model, on loopback, for measuring the product's HTTP embeddings path with a
real encoder (BENCHMARKS.md §7). Needs sentence-transformers (requirements-local-embeddings.txt); the bot never
imports this module. It stops on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from typing import Any

from aiohttp import web


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
    parser.add_argument("model_dir")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    module = importlib.import_module("sentence_transformers")
    model = module.SentenceTransformer(args.model_dir, local_files_only=True)
    web.run_app(make_app(model, args.model_dir), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
