"""The engine's value types: its configuration, the memory context it hands the chat layer as data, and
the reports its operations return. No behaviour; a host builds the config from its own settings
(the bot: ``companion.ops.engine_assembly.engine_config``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, tzinfo
from zoneinfo import ZoneInfo

from companion.core.models import Memory, MemoryType, Recalled, Tier
from companion.engine.profile import ProfilePolicy
from companion.engine.retrievers import DensePolicy


@dataclass(frozen=True, slots=True)
class EngineConfig:
    recall_max: int = 2
    recall_min_importance: float = 50.0
    recall_min_match: float = 0.25
    recall_cooldown_turns: int = 5
    extract_max_turns: int = 12
    capacity: int = 200
    tz: tzinfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))
    profile: ProfilePolicy = field(default_factory=ProfilePolicy)
    important_keywords: tuple[str, ...] = ()  # added to the keyword dictionary
    cache_memories: int | None = None  # memories the recall index cache holds; None: the default budget
    dense: DensePolicy = field(default_factory=DensePolicy)


@dataclass(slots=True)
class MemoryContext:
    """What one reply call may know: the profile core, the dynamic traits this turn touches, and the
    recalled memories. Used for this call only; never written back or extracted from."""

    core: str = ""
    dynamic: list[str] = field(default_factory=list)
    recalled: list[Recalled] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)  # how the user asked to be talked to: always apply
    recent: list[str] = field(default_factory=list)  # core facts learned in the last day
    today: list[str] = field(default_factory=list)  # small things the user reported today (short-term)
    # A question about time ("下周有什么安排"): the days it asks about and what happens on them, dated.
    asked: tuple[date, date] | None = None
    scheduled: list[str] = field(default_factory=list)
    # A told event that has ended (or a yearly date that is today) to follow up on: a cue, not a fact.
    followup: Memory | None = None


@dataclass(frozen=True, slots=True)
class Standing:
    instructions: list[str]
    recent: list[str]
    # The newest lasting facts whatever their age: what the profile's core cannot carry yet (there is none,
    # never built or dropped by a forget until it is rebuilt; or they were learned after it was built).
    lasting: list[Memory] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShortStats:
    turns: int
    events: int
    recall_hit_rate: float
    last_extraction_at: datetime | None


@dataclass(frozen=True, slots=True)
class Saved:
    """A save's result: the stored memory, and the words it replaced when the save retold a memory in
    other words, as kept (a superseded copy with its own handle; the receipt says "改成了…，原来是…" and
    offers an undo)."""

    memory: Memory
    replaced: Memory | None = None
    date_unclear: bool = False  # the words named a day that does not exist: saved without a date


@dataclass(frozen=True, slots=True)
class Provenance:
    """``/why``: the memory (with its source message and times), what it replaced, what replaced it."""

    memory: Memory
    replaced: list[Memory]
    replaced_by: Memory | None


@dataclass(frozen=True, slots=True)
class MemoryStats:
    by_tier: dict[Tier, int]
    by_type: dict[MemoryType, int]
    archived: int
    superseded: int
    learned_this_week: int
    evicted_this_week: int
    pending_turns: int


@dataclass(frozen=True, slots=True)
class Consolidation:
    turns: int
    inserted: int
    updated: int


@dataclass(frozen=True, slots=True)
class DecayReport:
    scopes: int
    decayed: int
    removed: int
