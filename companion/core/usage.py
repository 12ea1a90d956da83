"""Cost accounting: one ``UsageRecord`` per LLM call, the one record type from the client to the usage log.

The LLM client builds the record (purpose, model, tokens, the server's cache hit/miss split, latency) and
awaits each of its ``UsageSink``s: a store's usage log (``MemoryStore.usage_log().add``, the one a deployment
keeps) is such a sink, and so is a ``UsageTotals`` (tests, the benchmarks: an in-process tally).
The usage log's report comes back as ``UsageCell`` rows, one per local day and purpose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, date, datetime, tzinfo


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request to the model. ``cache_hit_tokens``/``cache_miss_tokens`` are None when the server did
    not report them (only DeepSeek and OpenAI-style ``cached_tokens`` servers do). A failed request has
    ``ok=False`` and zero tokens: it still cost latency and, past the first byte, maybe money. The
    character counts measure a call where the server reports no tokens; the usage table keeps tokens."""

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
    prompt_chars: int = 0
    completion_chars: int = 0


UsageSink = Callable[[UsageRecord], Awaitable[None]]


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
    prompt_chars: int = 0
    completion_chars: int = 0

    def add(self, record: UsageRecord) -> None:
        self.calls += 1
        self.failures += not record.ok
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.cache_hit_tokens += record.cache_hit_tokens or 0
        self.cache_miss_tokens += record.cache_miss_tokens or 0
        self.tool_calls += record.tool_calls
        self.latency_ms += record.latency_ms
        self.prompt_chars += record.prompt_chars
        self.completion_chars += record.completion_chars

    def merge(self, other: Totals) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def cache_hit_share(self) -> float | None:
        """Hit tokens over the prompt tokens of calls that reported a split; None when none did."""
        known = self.cache_hit_tokens + self.cache_miss_tokens
        return self.cache_hit_tokens / known if known else None


@dataclass(slots=True)
class UsageTotals:
    """A sink that adds records up by (local day, purpose): ``await totals(record)``. It keeps the sums,
    never the records, so a long-running process can tally every call."""

    tz: tzinfo = UTC
    cells: dict[tuple[date, str], Totals] = field(default_factory=dict)

    async def __call__(self, record: UsageRecord) -> None:
        self.add(record)

    def add(self, record: UsageRecord) -> None:
        key = (record.at.astimezone(self.tz).date(), record.purpose)
        self.cells.setdefault(key, Totals()).add(record)

    def by_purpose(self) -> dict[str, Totals]:
        out: dict[str, Totals] = {}
        for (_day, purpose), cell in self.cells.items():
            out.setdefault(purpose, Totals()).merge(cell)
        return out

    def by_day(self) -> dict[date, Totals]:
        out: dict[date, Totals] = {}
        for (day, _purpose), cell in self.cells.items():
            out.setdefault(day, Totals()).merge(cell)
        return out

    def calls(self) -> dict[str, int]:
        """Calls per purpose (the benchmarks' count of what a run asked the model)."""
        return {purpose: totals.calls for purpose, totals in self.by_purpose().items()}


@dataclass(frozen=True, slots=True)
class UsageCell:
    """One (local day, purpose) of the usage log's report (the operator's stats and chart)."""

    day: str  # YYYY-MM-DD, local
    purpose: str
    calls: int
    failures: int
    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int
    cache_miss_tokens: int
    avg_latency_ms: float
    tool_calls: int
