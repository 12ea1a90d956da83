"""A local OpenAI-compatible chat-completions server so the real openai SDK can be tested offline.

Replies come from a scriptable responder; failures, delays, blank and broken bodies can be injected
to exercise the bot's error handling through the SDK's real exception mapping.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from .base import FakeServer

JSONDict = dict[str, Any]
Responder = Callable[[JSONDict], str | Awaitable[str]]

DEFAULT_CHAT_REPLY = "好的，我在听。"
DEFAULT_JSON_REPLY = '{"memories": []}'
MODELS = ("deepseek-chat",)

# OpenAI's error "type" per status, so the SDK and logs see realistic bodies.
_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("authentication_error", "invalid_api_key"),
    402: ("insufficient_balance", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
}


def _error_body(status: int, message: str) -> JSONDict:
    err_type, code = _ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": message, "type": err_type, "param": None, "code": code}}


def _error_response(status: int, message: str) -> web.Response:
    return web.json_response(_error_body(status, message), status=status)


def is_json_mode(body: JSONDict) -> bool:
    fmt = body.get("response_format")
    return isinstance(fmt, dict) and fmt.get("type") == "json_object"


def request_text(body: JSONDict) -> str:
    """All message contents joined by newlines; multimodal parts contribute their text."""
    parts: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p)
    return "\n".join(parts)


async def _resolve(reply: str | Responder, body: JSONDict) -> str:
    if isinstance(reply, str):
        return reply
    result = reply(body)
    return await result if inspect.isawaitable(result) else result


class FakeLLM(FakeServer):
    """Chat-completions server on 127.0.0.1; pass ``base_url`` to ``AsyncOpenAI`` (with or without /v1)."""

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        # When set, requests with another bearer key get 401, like a real provider.
        self.api_key = api_key
        self.requests: list[JSONDict] = []
        self.headers: list[CIMultiDict[str]] = []
        self.responder: Responder = self._default_responder
        self._chat_reply: str | Responder = DEFAULT_CHAT_REPLY
        self._json_reply: str | Responder = DEFAULT_JSON_REPLY
        self._chat_queue: deque[str] = deque()
        self._json_queue: deque[str] = deque()
        self._failures: deque[tuple[int, JSONDict]] = deque()
        self._delays: deque[float] = deque()
        self._raw: deque[tuple[str, str]] = deque()
        self._blanks = 0
        self._ids = itertools.count(1)

    def _routes(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", self._completions)
            app.router.add_get(f"{prefix}/models", self._models)

    # ---- scripting ---------------------------------------------------------------------------

    def set_chat_reply(self, reply: str | Responder) -> None:
        """Answer for non-JSON requests, used by the built-in responder (not by a replaced one)."""
        self._chat_reply = reply

    def set_json_reply(self, reply: str | Responder) -> None:
        self._json_reply = reply

    def queue_chat(self, *texts: str) -> None:
        """One-shot answers for chat requests, consumed in order before the responder is asked."""
        self._chat_queue.extend(texts)

    def queue_json(self, *texts: str) -> None:
        self._json_queue.extend(texts)

    def fail_next(self, count: int = 1, status: int = 500, body: JSONDict | None = None) -> None:
        if body is None:
            body = _error_body(status, f"fake failure (HTTP {status})")
        self._failures.extend([(status, body)] * count)

    def delay_next(self, seconds: float, count: int = 1) -> None:
        self._delays.extend([seconds] * count)

    def blank_next(self, count: int = 1) -> None:
        self._blanks += count

    def raw_next(self, text: str, *, content_type: str = "text/html") -> None:
        """Answer the next request with HTTP 200 and a body that is not a completion."""
        self._raw.append((text, content_type))

    def clear(self) -> None:
        """Forget recorded requests; scripted replies and injections stay queued."""
        self.requests.clear()
        self.headers.clear()

    # ---- inspection --------------------------------------------------------------------------

    request_text = staticmethod(request_text)
    is_json_mode = staticmethod(is_json_mode)

    def chat_requests(self) -> list[JSONDict]:
        return [r for r in self.requests if not is_json_mode(r)]

    def json_requests(self) -> list[JSONDict]:
        return [r for r in self.requests if is_json_mode(r)]

    async def wait_for_requests(
        self,
        count: int,
        predicate: Callable[[JSONDict], bool] | None = None,
        timeout: float = 10.0,
    ) -> list[JSONDict]:
        def matching() -> list[JSONDict]:
            return [r for r in self.requests if predicate is None or predicate(r)]

        def describe() -> str:
            tails = [request_text(r)[-80:] for r in self.requests[-3:]]
            return (
                f"expected >= {count} matching LLM request(s) within {timeout}s, got {len(matching())} "
                f"(of {len(self.requests)} total); last prompts end with: {tails}"
            )

        await self._wait_until(lambda: len(matching()) >= count, timeout, describe)
        return matching()

    # ---- internals ---------------------------------------------------------------------------

    async def _default_responder(self, body: JSONDict) -> str:
        return await _resolve(self._json_reply if is_json_mode(body) else self._chat_reply, body)

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _error_response(401, "Authentication Fails (invalid api key)")
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in MODELS]
        return web.json_response({"object": "list", "data": data})

    async def _completions(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return _error_response(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be an object")
        self.requests.append(body)
        self.headers.append(CIMultiDict(request.headers))
        self._notify()

        if self._delays:
            await asyncio.sleep(self._delays.popleft())
        if not self._authorised(request):
            return _error_response(401, "Authentication Fails (invalid api key)")
        if self._failures:
            status, error = self._failures.popleft()
            return web.json_response(error, status=status)
        if self._raw:
            text, content_type = self._raw.popleft()
            return web.Response(text=text, content_type=content_type)
        if body.get("stream"):
            return _error_response(400, "streaming is not supported by FakeLLM")
        if not body.get("model") or not isinstance(body.get("messages"), list) or not body["messages"]:
            return _error_response(400, "model and non-empty messages are required")

        if self._blanks:
            self._blanks -= 1
            content = ""
        else:
            queue = self._json_queue if is_json_mode(body) else self._chat_queue
            content = queue.popleft() if queue else await _resolve(self.responder, body)
        return web.json_response(self._completion(body, content))

    def _authorised(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    def _completion(self, body: JSONDict, content: str) -> JSONDict:
        # Rough token estimate (chars // 2): no tokenizer offline, and tests only need plausible numbers.
        prompt_tokens = len(request_text(body)) // 2
        completion_tokens = len(content) // 2
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
