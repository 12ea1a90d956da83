"""The only module that talks HTTP to the model: one AsyncOpenAI client, typed errors, usage counts."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from companion.core.errors import ConfigError, LLMBadResponseError, LLMError, LLMUnavailableError

log = logging.getLogger(__name__)

Message = dict[str, str]

CHECK_TIMEOUT_SECONDS = 10.0  # the start-up key check; a slow answer is not a wrong key


@dataclass(slots=True)
class Usage:
    """Calls and prompt/completion sizes per purpose (reply, extraction, profile), for cost reports."""

    calls: Counter[str] = field(default_factory=Counter)
    prompt_chars: Counter[str] = field(default_factory=Counter)
    completion_chars: Counter[str] = field(default_factory=Counter)
    prompt_tokens: Counter[str] = field(default_factory=Counter)
    completion_tokens: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)


class LLMClient:
    """Chat and JSON-mode calls. The SDK retries connection errors, 429 and 5xx with exponential
    backoff (``max_retries``); what still fails becomes ``LLMUnavailableError``."""

    def __init__(
        self, *, api_key: str, base_url: str, model: str, timeout: float = 30.0, max_retries: int = 3
    ) -> None:
        self.model = model
        self.usage = Usage()
        self._client = AsyncOpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries)

    async def close(self) -> None:
        await self._client.close()

    async def check(self) -> None:
        """One cheap call at start-up (list the models): a rejected key is a ConfigError, so a wrong key
        stops the bot with one line instead of failing every reply. A server that cannot be reached or
        has no models endpoint is not the key's fault: ``LLMUnavailableError``, or nothing for a 404."""
        quick = self._client.with_options(max_retries=0, timeout=CHECK_TIMEOUT_SECONDS)
        try:
            await quick.models.list()
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise ConfigError(f"the LLM rejected the API key (HTTP {exc.status_code}); check LLM_API_KEY") from None
        except openai.NotFoundError:
            log.debug("the LLM server has no models endpoint; the key is checked by the first call")
        except openai.APIError as exc:
            status = getattr(exc, "status_code", None)
            raise LLMUnavailableError(f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "")) from None

    async def chat(
        self, messages: Sequence[Message], *, purpose: str = "reply", temperature: float = 0.8,
        max_tokens: int = 800,
    ) -> str:
        return await self._complete(messages, purpose=purpose, temperature=temperature, max_tokens=max_tokens)

    async def json(
        self, messages: Sequence[Message], *, purpose: str, max_tokens: int = 1200
    ) -> dict[str, Any]:
        """JSON mode. DeepSeek requires the word "json" in the prompt; we check it here so a prompt
        edit cannot silently break the call."""
        if not any("json" in m.get("content", "").lower() for m in messages):
            raise ValueError("JSON-mode prompts must mention 'json' and show an example")
        text = await self._complete(
            messages, purpose=purpose, temperature=0.2, max_tokens=max_tokens,
            response_format={"type": "json_object"},
        )
        with self._counting_failures(purpose):
            return _json_object(text, purpose)

    @contextmanager
    def _counting_failures(self, purpose: str) -> Iterator[None]:
        try:
            yield
        except LLMError:
            self.usage.failures[purpose] += 1
            raise

    async def _complete(self, messages: Sequence[Message], *, purpose: str, **options: Any) -> str:
        self.usage.calls[purpose] += 1
        self.usage.prompt_chars[purpose] += sum(len(m.get("content", "")) for m in messages)
        with self._counting_failures(purpose):
            response = await self._request(messages, purpose, options)
            content = _content(response, purpose)
        self.usage.completion_chars[purpose] += len(content)
        if response.usage is not None:
            self.usage.prompt_tokens[purpose] += response.usage.prompt_tokens
            self.usage.completion_tokens[purpose] += response.usage.completion_tokens
        log.debug("llm %s answered %d chars", purpose, len(content))
        return content

    async def _request(self, messages: Sequence[Message], purpose: str, options: dict[str, Any]) -> ChatCompletion:
        """One SDK call (with the SDK's own retries), its failures mapped to our typed errors."""
        try:
            # The SDK's documented custom-request path: same retries, timeouts and errors as
            # ``chat.completions.create``, without its per-field parameter transformation, which
            # measured ~6 ms of CPU per call with ten turns of history (BENCHMARKS.md, bot throughput).
            response = await self._client.post(
                "/chat/completions",
                body={"model": self.model, "messages": list(messages), **options},
                cast_to=ChatCompletion,
            )
        except (openai.APIConnectionError, openai.APITimeoutError, openai.RateLimitError,
                openai.InternalServerError) as exc:
            raise LLMUnavailableError(f"{purpose}: {type(exc).__name__}") from exc
        except json.JSONDecodeError:
            # A broken JSON body with a JSON content type escapes the SDK as a plain decode error.
            raise LLMBadResponseError(f"{purpose}: the server sent malformed JSON") from None
        except openai.APIError as exc:
            raise LLMUnavailableError(f"{purpose}: {type(exc).__name__} {getattr(exc, 'status_code', '')}") from exc
        if not isinstance(response, ChatCompletion):
            # A non-JSON 200 (a proxy's HTML error page) comes back from the SDK as a bare string.
            raise LLMBadResponseError(f"{purpose}: the server did not answer with a chat completion")
        return response


def _content(response: ChatCompletion, purpose: str) -> str:
    content = response.choices[0].message.content if response.choices else None
    if not content or not content.strip():
        raise LLMBadResponseError(f"{purpose}: blank answer")
    return content.strip()


def _json_object(text: str, purpose: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMBadResponseError(f"{purpose}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise LLMBadResponseError(f"{purpose}: JSON answer is not an object")
    return data
