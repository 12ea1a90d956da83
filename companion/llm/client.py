"""The only module that talks HTTP to the model: one AsyncOpenAI client, typed errors, usage records.

Function calling follows DeepSeek's documented OpenAI-compatible format: ``tools`` (a list of
``{"type": "function", "function": {name, description, parameters}}``) and ``tool_choice``
("auto" | "none" | "required") in the request; an answer with ``finish_reason == "tool_calls"`` carries
``message.tool_calls`` and may have no text at all, which is a normal answer, not a blank one. The caller
answers each call with a ``{"role": "tool", "tool_call_id": ..., "content": ...}`` message.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

import httpx2
import openai
from openai import AsyncOpenAI

from companion.core.errors import LLMBadResponseError, LLMError, LLMUnavailableError
from companion.core.timeutil import utcnow
from companion.core.usage import UsageRecord, UsageSink
from companion.llm.jsonmodel import Message as Message  # re-exported: callers build messages with it
from companion.llm.jsonmodel import json_object

log = logging.getLogger(__name__)

ToolChoice = str  # "auto" | "none" | "required"

# The SDK's own encoding of a request body (openai._utils._json.openapi_dumps): compact, UTF-8, no NaN.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class JsonArray(tuple[dict[str, Any], ...]):
    """Request items whose JSON text is made once: the tool definitions, the same on every reply call and
    two thirds of its body (``Toolset.specs``). ``request_body`` splices the text in instead of encoding
    them again; the items themselves must not change afterwards."""

    json: str

    def __new__(cls, items: Sequence[dict[str, Any]]) -> JsonArray:
        made = super().__new__(cls, items)
        made.json = _ENCODER.encode(made)
        return made


def request_body(model: str, messages: Sequence[Message], options: dict[str, Any]) -> bytes:
    """A chat completion request's JSON as the SDK encodes it, with a ``JsonArray`` option's text reused."""
    encoded = {key: value for key, value in options.items() if isinstance(value, JsonArray)}
    text = _ENCODER.encode({"model": model, "messages": list(messages),
                            **{key: value for key, value in options.items() if key not in encoded}})
    if encoded:
        text = text[:-1] + "".join(f",{json.dumps(key)}:{value.json}" for key, value in encoded.items()) + "}"
    return text.encode()


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call the model asked for; ``arguments`` is the JSON text exactly as it sent it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Completion:
    """A model answer: text, tool calls, or both (DeepSeek sometimes says a few words before calling)."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None

    def assistant_message(self) -> Message:
        """The answer as the assistant message that must precede its tool results in the next request."""
        message: Message = {"role": "assistant", "content": self.content or ""}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


class LLMClient:
    """Chat, tool-calling and JSON-mode calls. The SDK retries connection errors, 429 and 5xx with
    exponential backoff (``max_retries``); what still fails becomes ``LLMUnavailableError``.

    Every request becomes one ``UsageRecord``, handed to each of ``usage_sinks`` (the composition root adds
    the store's usage log once storage is open, the one tally a deployment keeps; a benchmark adds a
    ``UsageTotals``); a failing sink is logged and never fails a call, nor keeps the record from the others."""

    def __init__(
        self, *, api_key: str, base_url: str, model: str, timeout: float = 30.0, max_retries: int = 3,
        usage_sink: UsageSink | None = None, clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.model = model
        self.usage_sinks: list[UsageSink] = [] if usage_sink is None else [usage_sink]
        self._clock = clock
        self._client = AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
                                   http_client=_http_client())

    async def close(self) -> None:
        await self._client.close()

    async def chat(
        self, messages: Sequence[Message], *, purpose: str = "reply", temperature: float = 0.8,
        max_tokens: int = 800,
    ) -> str:
        completion = await self.complete(messages, purpose=purpose, temperature=temperature, max_tokens=max_tokens)
        if completion.content is None:  # tool calls nobody offered: no text for the user
            raise LLMBadResponseError(f"{purpose}: tool calls instead of text")
        return completion.content

    async def complete(
        self, messages: Sequence[Message], *, purpose: str = "reply", tools: Sequence[dict[str, Any]] = (),
        tool_choice: ToolChoice | None = None, temperature: float = 0.8, max_tokens: int = 800,
    ) -> Completion:
        """One chat call. Without ``tools`` the request carries no tools field at all (the plain call);
        with them, an answer that is only tool calls is valid. A text-less answer without tool calls is
        ``LLMBadResponseError``."""
        options: dict[str, Any] = {"temperature": temperature, "max_tokens": max_tokens}
        if tools:
            options["tools"] = tools if isinstance(tools, JsonArray) else list(tools)
            if tool_choice is not None:
                options["tool_choice"] = tool_choice
        return await self._complete(messages, purpose=purpose, **options)

    async def json(
        self, messages: Sequence[Message], *, purpose: str, max_tokens: int = 1200
    ) -> dict[str, Any]:
        """JSON mode. DeepSeek requires the word "json" in the prompt; we check it here so a prompt
        edit cannot silently break the call."""
        if not any("json" in str(m.get("content") or "").lower() for m in messages):
            raise ValueError("JSON-mode prompts must mention 'json' and show an example")
        completion = await self._complete(
            messages, purpose=purpose, temperature=0.2, max_tokens=max_tokens,
            response_format={"type": "json_object"},
        )
        return json_object(completion.content or "", purpose)

    async def _complete(self, messages: Sequence[Message], *, purpose: str, **options: Any) -> Completion:
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        started = time.perf_counter()
        try:
            body = await self._request(messages, purpose, options)
            completion = _completion(body, purpose)
        except LLMError:
            await self._record(purpose, None, started, prompt_chars, None)
            raise
        await self._record(purpose, body.get("usage"), started, prompt_chars, completion)
        log.debug("llm %s answered %d chars, %d tool calls", purpose, len(completion.content or ""),
                  len(completion.tool_calls))
        return completion

    async def _record(
        self, purpose: str, usage: Any, started: float, prompt_chars: int, completion: Completion | None,
    ) -> None:
        """One record per request (``completion`` None: it failed), to every sink."""
        if not isinstance(usage, dict) or completion is None:
            usage = {}
        hit, miss = cache_split(usage)
        record = UsageRecord(
            at=self._clock(), purpose=purpose, model=self.model,
            prompt_tokens=_count(usage.get("prompt_tokens")),
            completion_tokens=_count(usage.get("completion_tokens")),
            cache_hit_tokens=hit, cache_miss_tokens=miss,
            latency_ms=round((time.perf_counter() - started) * 1000, 3), ok=completion is not None,
            tool_calls=len(completion.tool_calls) if completion else 0, prompt_chars=prompt_chars,
            completion_chars=len(completion.content or "") if completion else 0,
        )
        for sink in self.usage_sinks:
            try:
                await sink(record)
            except Exception:  # an edge: accounting must never cost the user a reply
                log.exception("usage sink failed for a %s call", purpose)

    async def _request(self, messages: Sequence[Message], purpose: str, options: dict[str, Any]) -> dict[str, Any]:
        """One SDK call (with the SDK's own retries), its failures mapped to our typed errors; the answer's
        JSON body as it came."""
        try:
            # The SDK's documented custom-request path: same retries, timeouts and errors as
            # ``chat.completions.create``, without its per-field parameter transformation (~6 ms of CPU per
            # call with ten turns of history, docs/benchmarks-history.md section 3). The body comes back as bytes:
            # the few fields read here need no typed ChatCompletion (~0.25 ms a call, section 15). The body goes as
            # bytes, which the SDK sends as they are: the tool definitions are encoded once, not per call.
            raw = await self._client.post(
                "/chat/completions", content=request_body(self.model, messages, options), cast_to=bytes,
            )
        except (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                openai.InternalServerError) as exc:
            raise LLMUnavailableError(f"{purpose}: {type(exc).__name__}") from exc
        except openai.APIError as exc:
            raise LLMUnavailableError(f"{purpose}: {type(exc).__name__} {getattr(exc, 'status_code', '')}") from exc
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # a proxy's HTML error page with status 200, broken JSON
            raise LLMBadResponseError(f"{purpose}: the server did not answer with a chat completion") from None
        if not isinstance(body, dict):
            raise LLMBadResponseError(f"{purpose}: the server did not answer with a chat completion")
        return body


def _http_client() -> httpx2.AsyncClient | None:
    """httpx over aiohttp where aiohttp is installed (the bot's aiogram brings it): the SDK's same retries,
    timeouts and errors with less per-request work (``companion.llm.http``; docs/benchmarks-history.md sections 15 and
    21). The engine installed alone (a host such as AstrBot) may lack aiohttp and keeps the SDK's default."""
    try:
        from companion.llm.http import LeanHttpClient
    except ImportError:
        return None
    return LeanHttpClient(timeout=openai.DEFAULT_TIMEOUT, limits=openai.DEFAULT_CONNECTION_LIMITS,
                          follow_redirects=True)


def cache_split(usage: dict[str, Any]) -> tuple[int | None, int | None]:
    """(hit, miss) prompt tokens from an answer's usage. DeepSeek sends ``prompt_cache_hit_tokens`` and
    ``prompt_cache_miss_tokens``; OpenAI-style servers send ``prompt_tokens_details.cached_tokens``; anything
    else has no split."""
    hit, miss = usage.get("prompt_cache_hit_tokens"), usage.get("prompt_cache_miss_tokens")
    if _is_count(hit) and _is_count(miss):
        return hit, miss
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt = usage.get("prompt_tokens")
    if _is_count(cached) and _is_count(prompt):
        return cached, max(prompt - cached, 0)
    return None, None


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(value: Any) -> int:
    return value if _is_count(value) else 0


def _completion(body: dict[str, Any], purpose: str) -> Completion:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMBadResponseError(f"{purpose}: no choices in the answer")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        message = {}
    calls = tuple(
        ToolCall(id=str(call.get("id") or ""), name=str(function.get("name") or ""),
                 arguments=str(function.get("arguments") or ""))
        for call in message.get("tool_calls") or ()
        if isinstance(call, dict) and isinstance(function := call.get("function"), dict)
    )
    content = message.get("content")
    content = (content.strip() if isinstance(content, str) else "") or None
    if content is None and not calls:
        raise LLMBadResponseError(f"{purpose}: blank answer")
    finish = choice.get("finish_reason")
    return Completion(content=content, tool_calls=calls, finish_reason=finish if isinstance(finish, str) else None)
