"""Cost accounting: one ``UsageRecord`` per LLM call, handed to an optional async sink.

The client builds the record (purpose, model, tokens, DeepSeek's cache hit/miss split, latency) and
awaits the sink; where the records go (a table, a report) is the caller's business. ``UsageTotals``
adds records up by local day and purpose, for tests, the benchmarks and small reports.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from typing import Any


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request to the model. ``cache_hit_tokens``/``cache_miss_tokens`` are None when the server did
    not report them (only DeepSeek and OpenAI-style ``cached_tokens`` servers do). A failed request has
    ``ok=False`` and zero tokens: it still cost latency and, past the first byte, maybe money."""

    at: datetime
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int | None
    cache_miss_tokens: int | None
    latency_ms: float
    ok: bool = True
    tool_calls: int = 0


UsageSink = Callable[[UsageRecord], Awaitable[None]]


def cache_split(usage: Any) -> tuple[int | None, int | None]:
    """(hit, miss) prompt tokens from an SDK usage object. DeepSeek sends ``prompt_cache_hit_tokens`` and
    ``prompt_cache_miss_tokens`` as extra fields; OpenAI-style servers send
    ``prompt_tokens_details.cached_tokens``; anything else has no split."""
    if usage is None:
        return None, None
    extra: dict[str, Any] = getattr(usage, "model_extra", None) or {}
    hit, miss = extra.get("prompt_cache_hit_tokens"), extra.get("prompt_cache_miss_tokens")
    if isinstance(hit, int) and isinstance(miss, int):
        return hit, miss
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    prompt = getattr(usage, "prompt_tokens", None)
    if isinstance(cached, int) and isinstance(prompt, int):
        return cached, max(prompt - cached, 0)
    return None, None


@dataclass(slots=True)
class Totals:
    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hit_tokens: int = 0
    cache_miss_tokens: int = 0
    tool_calls: int = 0
    latency_ms: float = 0.0

    def add(self, record: UsageRecord) -> None:
        self.calls += 1
        self.failures += not record.ok
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.cache_hit_tokens += record.cache_hit_tokens or 0
        self.cache_miss_tokens += record.cache_miss_tokens or 0
        self.tool_calls += record.tool_calls
        self.latency_ms += record.latency_ms

    @property
    def cache_hit_share(self) -> float | None:
        """Hit tokens over the prompt tokens of calls that reported a split; None when none did."""
        known = self.cache_hit_tokens + self.cache_miss_tokens
        return self.cache_hit_tokens / known if known else None


@dataclass(slots=True)
class UsageTotals:
    """An in-memory sink: ``await totals(record)`` adds the record to its (local day, purpose) cell."""

    tz: tzinfo = UTC
    records: list[UsageRecord] = field(default_factory=list)
    cells: dict[tuple[date, str], Totals] = field(default_factory=dict)

    async def __call__(self, record: UsageRecord) -> None:
        self.add(record)

    def add(self, record: UsageRecord) -> None:
        self.records.append(record)
        key = (record.at.astimezone(self.tz).date(), record.purpose)
        self.cells.setdefault(key, Totals()).add(record)

    def by_purpose(self) -> dict[str, Totals]:
        out: dict[str, Totals] = {}
        for record in self.records:
            out.setdefault(record.purpose, Totals()).add(record)
        return out

    def by_day(self) -> dict[date, Totals]:
        out: dict[date, Totals] = {}
        for record in self.records:
            out.setdefault(record.at.astimezone(self.tz).date(), Totals()).add(record)
        return out
