"""A local OpenAI-compatible chat-completions server so the real openai SDK can be tested offline.

Replies come from a scriptable responder; failures, delays, blank and broken bodies can be injected
to exercise the bot's error handling through the SDK's real exception mapping. Answers can be tool
calls (``queue_tool_calls`` or a responder returning ``ToolCallAnswer``), checked against the request
the way the real API checks them; ``/embeddings`` answers with deterministic unit vectors.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import itertools
import json
import math
import random
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from .base import FakeServer

JSONDict = dict[str, Any]


@dataclass(frozen=True)
class ToolCallAnswer:
    """An assistant answer that calls tools: ``calls`` are (function name, arguments as a dict or as raw
    JSON text, which may be deliberately broken); ``content`` is optional text said alongside."""

    calls: Sequence[tuple[str, JSONDict | str]]
    content: str | None = None


Answer = str | ToolCallAnswer
Responder = Callable[[JSONDict], Answer | Awaitable[Answer]]
DEFAULT_EMBEDDING_DIM = 64

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


def embedding(text: str, dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    """A unit vector seeded by the text's hash: the same text always gets the same vector."""
    rng = random.Random(hashlib.sha256(text.encode("utf-8")).digest())
    vector = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


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


def _protocol_error(body: JSONDict) -> str | None:
    """What the real API refuses with HTTP 400 about tools and JSON mode, or None."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "tools must be a non-empty list"
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
                return "every tool needs type 'function' and a function name"
            if not isinstance(function.get("parameters", {}), dict):
                return f"parameters of {function['name']} must be a JSON schema object"
    if body.get("tool_choice") is not None and tools is None:
        return "tool_choice is only allowed when tools are given"
    if is_json_mode(body) and "json" not in request_text(body).lower():
        return "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'."
    waiting: list[str] = []
    for message in body["messages"]:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            if message.get("tool_call_id") not in waiting:
                return "a tool message must answer a tool_call_id of the preceding assistant message"
            waiting.remove(message["tool_call_id"])
            continue
        if waiting:
            return "an assistant message with tool_calls must be followed by a tool message for each call"
        if role == "assistant":
            waiting = [call.get("id") for call in message.get("tool_calls") or []]
    return None


async def _resolve(reply: Answer | Responder, body: JSONDict) -> Answer:
    if isinstance(reply, str | ToolCallAnswer):
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
        self._chat_reply: Answer | Responder = DEFAULT_CHAT_REPLY
        self._json_reply: str | Responder = DEFAULT_JSON_REPLY
        self._chat_queue: deque[Answer] = deque()
        self._json_queue: deque[str] = deque()
        self._failures: deque[tuple[int, JSONDict]] = deque()
        self._delays: deque[float] = deque()
        self._raw: deque[tuple[str, str]] = deque()
        self._cuts: deque[float] = deque()
        self._blanks = 0
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._last_prompt = ""
        self.embedding_dim = DEFAULT_EMBEDDING_DIM
        self.embedding_requests: list[JSONDict] = []

    def _routes(self, app: web.Application) -> None:
        for prefix in ("", "/v1"):
            app.router.add_post(f"{prefix}/chat/completions", self._completions)
            app.router.add_post(f"{prefix}/embeddings", self._embeddings)
            app.router.add_get(f"{prefix}/models", self._models)

    # ---- scripting ---------------------------------------------------------------------------

    def set_chat_reply(self, reply: Answer | Responder) -> None:
        """Answer for non-JSON requests, used by the built-in responder (not by a replaced one)."""
        self._chat_reply = reply

    def set_json_reply(self, reply: str | Responder) -> None:
        self._json_reply = reply

    def queue_chat(self, *texts: str) -> None:
        """One-shot answers for chat requests, consumed in order before the responder is asked."""
        self._chat_queue.extend(texts)

    def queue_json(self, *texts: str) -> None:
        self._json_queue.extend(texts)

    def queue_tool_calls(self, *calls: tuple[str, JSONDict | str], content: str | None = None) -> None:
        """One chat answer that calls these tools, served in order with ``queue_chat`` answers."""
        self._chat_queue.append(ToolCallAnswer(calls, content))

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

    def cut_next(self, count: int = 1, keep: float = 0.5) -> None:
        """The next answers are cut off: the headers announce the whole completion, ``keep`` of its bytes
        are sent, then the connection closes (a server or proxy dying mid-reply). The client does not
        stream, so this is what a cut-off stream is to it."""
        self._cuts.extend([keep] * count)

    def clear(self) -> None:
        """Forget recorded requests; scripted replies and injections stay queued."""
        self.requests.clear()
        self.headers.clear()

    # ---- inspection --------------------------------------------------------------------------

    request_text = staticmethod(request_text)
    is_json_mode = staticmethod(is_json_mode)

    def chat_requests(self) -> list[JSONDict]:
        return [r for r in self.requests if not is_json_mode(r)]

    def tool_results(self, body: JSONDict) -> list[Any]:
        """The tool messages of a request, their JSON content parsed."""
        return [json.loads(m["content"]) for m in body["messages"] if m.get("role") == "tool"]

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

    async def _default_responder(self, body: JSONDict) -> Answer:
        return await _resolve(self._json_reply if is_json_mode(body) else self._chat_reply, body)

    async def _models(self, request: web.Request) -> web.Response:
        if not self._authorised(request):
            return _error_response(401, "Authentication Fails (invalid api key)")
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in MODELS]
        return web.json_response({"object": "list", "data": data})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
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
        problem = _protocol_error(body)
        if problem is not None:
            return _error_response(400, problem)

        answer: Answer
        if self._blanks:
            self._blanks -= 1
            answer = ""
        else:
            queued = self._json_queue if is_json_mode(body) else self._chat_queue
            answer = queued.popleft() if queued else await _resolve(self.responder, body)
        if isinstance(answer, ToolCallAnswer) and not body.get("tools"):
            return _error_response(400, "FakeLLM was scripted to call tools, but the request offered none")
        if self._cuts:
            return await self._cut_off(request, self._completion(body, answer), self._cuts.popleft())
        return web.json_response(self._completion(body, answer))

    @staticmethod
    async def _cut_off(request: web.Request, completion: JSONDict, keep: float) -> web.StreamResponse:
        payload = json.dumps(completion, ensure_ascii=False).encode()
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.content_length = len(payload)
        await response.prepare(request)
        await response.write(payload[: int(len(payload) * keep)])
        if request.transport is not None:
            request.transport.close()
        return response

    def _authorised(self, request: web.Request) -> bool:
        return self.api_key is None or request.headers.get("Authorization") == f"Bearer {self.api_key}"

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not body.get("model") or not isinstance(texts, list) or not texts:
            return _error_response(400, "model and a non-empty input are required")
        if not all(isinstance(t, str) and t for t in texts):
            return _error_response(400, "every input must be a non-empty string")
        self.embedding_requests.append(body)
        data = []
        for index, text in enumerate(texts):
            vector = embedding(text, self.embedding_dim)
            # The SDK asks for base64 (packed little-endian float32) unless told otherwise.
            if body.get("encoding_format") == "base64":
                encoded: list[float] | str = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            else:
                encoded = vector
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(len(t) for t in texts) // 2
        return web.json_response({"object": "list", "data": data, "model": body["model"],
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _completion(self, body: JSONDict, answer: Answer) -> JSONDict:
        message: JSONDict = {"role": "assistant", "content": answer if isinstance(answer, str) else answer.content}
        finish_reason = "stop"
        if isinstance(answer, ToolCallAnswer):
            finish_reason = "tool_calls"
            message["tool_calls"] = [
                {"id": f"call_{next(self._call_ids)}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str)
                              else json.dumps(args, ensure_ascii=False)}}
                for name, args in answer.calls
            ]
        content = json.dumps(message)
        # Rough token estimate (chars // 2): no tokenizer offline, and tests only need plausible numbers.
        prompt = request_text(body)
        prompt_tokens = len(prompt) // 2
        completion_tokens = len(content if isinstance(answer, ToolCallAnswer) else answer) // 2
        # DeepSeek's cache split, estimated like the totals: the prefix shared with the previous request.
        hit = min(common_prefix(prompt, self._last_prompt) // 2, prompt_tokens)
        self._last_prompt = prompt
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model"),
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "prompt_cache_hit_tokens": hit,
                "prompt_cache_miss_tokens": prompt_tokens - hit,
            },
        }


def common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, by bisection on slice equality (C speed on long prompts)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low
