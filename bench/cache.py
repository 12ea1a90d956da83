"""How much of each reply call's prompt repeats the previous call's, the part DeepSeek bills as a cache hit.

A request is flattened into the text stream the model reads (system message, tool definitions, then
each message with its role, tool calls and tool call ids), and tokens are estimated with DeepSeek's
published ratio (api-docs.deepseek.com, "Token & Token Usage"): one Chinese character ~ 0.6 token,
any other character ~ 0.3 token. Two shares per call:

- ``prefix``: the common prefix with the previous call of the same user, over the whole prompt (the
  issue's measure; an upper bound of what the cache can give).
- ``units``: DeepSeek's documented persistence rules (api-docs.deepseek.com/guides/kv_cache): a call hits
  only whole cached prefix units, written at the end of each request's input and at common prefixes
  detected between requests. Estimated as the longest unit this call starts with, among every earlier
  call's whole input and the common prefix of every two consecutive earlier calls. Fixed-interval units
  on long prompts and prefixes shared with other users (the system message is the same for everyone)
  are left out, so this is a lower estimate.

Pure functions of request bodies, so they can be pointed at requests recorded by any version of the bot.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fakes.llm import common_prefix

_CHINESE = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


def estimate_tokens(text: str) -> int:
    chinese = len(_CHINESE.findall(text))
    return math.ceil(0.6 * chinese + 0.3 * (len(text) - chinese))


def prompt_stream(body: Mapping[str, Any]) -> str:
    """The request as one text, in the order a chat template lays it out."""
    messages = list(body.get("messages") or [])
    parts: list[str] = []
    if messages and messages[0].get("role") == "system":
        parts.append(f"<system>{messages.pop(0).get('content') or ''}")
    if body.get("tools"):
        parts.append(f"<tools>{json.dumps(body['tools'], ensure_ascii=False, sort_keys=True)}")
    for message in messages:
        parts.append(f"<{message.get('role')}>{message.get('content') or ''}")
        if message.get("tool_calls"):
            parts.append(json.dumps(message["tool_calls"], ensure_ascii=False, sort_keys=True))
        if message.get("tool_call_id"):
            parts.append(f"<id:{message['tool_call_id']}>")
    return "".join(parts)


def cache_shares(bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
    """Per call, in order: prompt tokens and the ``prefix`` and ``units`` hit shares (see module doc).
    The bodies are one user's reply calls; the first call has nothing to hit."""
    streams = [prompt_stream(body) for body in bodies]
    out: list[dict[str, float]] = []
    units: list[str] = []
    for i, stream in enumerate(streams):
        total = estimate_tokens(stream)
        prefix = common_prefix(stream, streams[i - 1]) if i else 0
        unit = max((len(u) for u in units if stream.startswith(u)), default=0)
        units.append(stream)
        if i:
            units.append(stream[:prefix])
        out.append({"prompt_tokens": total,
                    "prefix": estimate_tokens(stream[:prefix]) / total if total else 0.0,
                    "units": estimate_tokens(stream[:unit]) / total if total else 0.0})
    return out


def share_summary(shares: Sequence[dict[str, float]], first: int = 3) -> dict[str, Any]:
    """Token-weighted and per-call shares from call number ``first`` (1-based) on."""
    tail = list(shares[first - 1:])
    if not tail:
        return {"calls": 0}
    tokens = sum(s["prompt_tokens"] for s in tail)
    summary: dict[str, Any] = {"calls": len(tail), "prompt_tokens_mean": round(tokens / len(tail), 1)}
    for key in ("prefix", "units"):
        values = sorted(s[key] for s in tail)
        summary[key] = {
            "weighted": round(sum(s[key] * s["prompt_tokens"] for s in tail) / tokens, 3),
            "mean": round(sum(values) / len(values), 3),
            "min": round(values[0], 3),
            "p10": round(values[len(values) // 10], 3),
        }
    return summary
