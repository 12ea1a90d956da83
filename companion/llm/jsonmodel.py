"""What the engine asks of a model: one JSON-mode call. ``LLMClient`` is one such model; a host embedding
the engine (the AstrBot plugin) passes an adapter over its own configured provider instead."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from companion.core.errors import LLMBadResponseError

# Chat messages as the API takes them: role and content, plus tool_calls / tool_call_id for tool turns.
Message = dict[str, Any]


class JsonModel(Protocol):
    async def json(self, messages: Sequence[Message], *, purpose: str, max_tokens: int = 1200) -> dict[str, Any]:
        """The model's answer to ``messages`` as a JSON object; raises ``LLMError`` when there is none."""
        ...


def json_object(text: str, purpose: str) -> dict[str, Any]:
    """The answer text as a JSON object, or ``LLMBadResponseError``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMBadResponseError(f"{purpose}: invalid JSON ({exc.msg})") from None
    except RecursionError:  # nesting deeper than the parser's stack: still just a bad answer
        raise LLMBadResponseError(f"{purpose}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise LLMBadResponseError(f"{purpose}: JSON answer is not an object")
    return data
