"""Pure rules of the memory tiers: review times, reminder leads, priority, review suggestions, tier
moves, what a reply may know, and capacity eviction. Every function takes ``now``; nothing here does I/O.

Tiers and the seed's validity stay consistent: a long-term memory is permanent, a medium-term one lasts
30 days, a short-term one 7 days (``VALIDITY_OF``); moving a memory between tiers moves its validity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from companion.core.models import Memory, MemoryType, Status, Tier, Validity
from companion.core.rules import REVIEW_PERIOD, expires_at

REMINDER_LEAD: dict[Tier, timedelta] = {
    Tier.SHORT: timedelta(hours=9), Tier.MEDIUM: timedelta(days=1), Tier.LONG: timedelta(days=7),
}
VALIDITY_OF: dict[Tier, Validity] = {Tier.SHORT: Validity.DAYS_7, Tier.MEDIUM: Validity.DAYS_30,
                                     Tier.LONG: Validity.PERMANENT}
ORDER = (Tier.SHORT, Tier.MEDIUM, Tier.LONG)
TIER_BONUS = {Tier.SHORT: 0, Tier.MEDIUM: 1, Tier.LONG: 2}
PROMOTE_AFTER_USES = 2  # recalled or mentioned this often during its period: suggest promoting
UNANSWERED_AFTER = timedelta(days=3)

LONG_IN_PROFILE = 10
MEDIUM_CANDIDATES = 5
SHORT_CANDIDATES = 2


class Action(StrEnum):
    PROMOTE = "promote"
    KEEP = "keep"
    ARCHIVE = "archive"
    FORGET = "forget"


def review_at(tier: Tier, entered: datetime) -> datetime:
    """When a memory that entered ``tier`` at ``entered`` is reviewed."""
    return entered + REVIEW_PERIOD[tier]


def remind_at(memory: Memory) -> datetime | None:
    """When the user is asked about it: its review time less the tier's lead."""
    return None if memory.review_at is None else memory.review_at - REMINDER_LEAD[memory.tier]


def is_due(memory: Memory, now: datetime) -> bool:
    when = remind_at(memory)
    return memory.is_active and not memory.pinned and when is not None and when <= now


def priority(importance: float, tier: Tier) -> int:
    """0-5: importance in fifths (0-3), plus the tier's weight (0-2), capped at 5."""
    return min(5, int(min(max(importance, 0.0), 100.0) // 25) + TIER_BONUS[tier])


def next_tier(tier: Tier) -> Tier:
    return ORDER[min(ORDER.index(tier) + 1, len(ORDER) - 1)]


def move_to_tier(memory: Memory, tier: Tier, now: datetime) -> Memory:
    """The memory in ``tier`` from ``now``: validity and expiry follow the tier, the review restarts."""
    validity = VALIDITY_OF[tier]
    return replace(memory, tier=tier, validity=validity, expires_at=expires_at(now, validity),
                   review_at=review_at(tier, now), updated_at=now)


def keep_for_another_period(memory: Memory, now: datetime) -> Memory:
    return replace(memory, review_at=review_at(memory.tier, now), updated_at=now)


def initial_tier(mtype: MemoryType, importance: float, explicit: bool, core: bool = False) -> Tier:
    """Extracted memories start short-term. An explicit save goes where it belongs: a lasting core
    preference or instruction long-term, important information medium-term, the rest short-term."""
    if not explicit:
        return Tier.SHORT
    if core or mtype is MemoryType.INSTRUCTION or (mtype is MemoryType.PREFERENCE and importance >= 60):
        return Tier.LONG
    return Tier.MEDIUM if importance >= 50 or mtype is MemoryType.FACT else Tier.SHORT


@dataclass(frozen=True, slots=True)
class Suggestion:
    action: Action
    reason: str  # Chinese, shown to the user


def suggest(memory: Memory, now: datetime) -> Suggestion:
    """What to do with a memory at its review: promote what came up often during its period, archive
    what was never used, keep the rest for another period."""
    uses = memory.mention_count + memory.access_count
    period = REVIEW_PERIOD[memory.tier]
    if uses >= PROMOTE_AFTER_USES and memory.tier is not Tier.LONG:
        return Suggestion(Action.PROMOTE, f"这段时间提到了{uses}次")
    used_lately = any(t is not None and now - t <= period for t in (memory.last_mentioned_at,
                                                                      memory.last_accessed_at))
    if uses == 0 or not used_lately:
        return Suggestion(Action.ARCHIVE, "这段时间一次都没用上")
    return Suggestion(Action.KEEP, "偶尔会用到")


def reply_candidates(memories: Iterable[Memory]) -> tuple[list[Memory], list[Memory], list[Memory]]:
    """(long-term for the profile core, candidates for recall, instructions that always apply).

    At most 10 long-term memories feed the core; the 5 most important medium-term and the 2 most recent
    short-term memories may be recalled when a turn touches them."""
    active = [m for m in memories if m.is_active]
    instructions = [m for m in active if m.type is MemoryType.INSTRUCTION]
    rest = [m for m in active if m.type is not MemoryType.INSTRUCTION]
    long = sorted((m for m in rest if m.tier is Tier.LONG), key=lambda m: (-m.importance, -m.id))[:LONG_IN_PROFILE]
    medium = sorted((m for m in rest if m.tier is Tier.MEDIUM), key=lambda m: (-m.importance, -m.id))
    short = sorted((m for m in rest if m.tier is Tier.SHORT), key=lambda m: (m.created_at, m.id), reverse=True)
    return long, [*medium[:MEDIUM_CANDIDATES], *short[:SHORT_CANDIDATES]], instructions


def evictable(memory: Memory) -> bool:
    return memory.is_active and not memory.pinned and memory.tier is not Tier.LONG


def eviction_order(memories: Sequence[Memory], now: datetime) -> list[Memory]:
    """Who goes first when a scope is over its cap: expired, then lowest importance, then least recently
    accessed, then oldest. Pinned and long-term memories are never evicted."""
    never = datetime.min.replace(tzinfo=now.tzinfo)

    def key(m: Memory) -> tuple[bool, float, datetime, datetime, int]:
        touched = m.last_accessed_at or m.last_mentioned_at or never
        return (not m.is_expired(now), m.importance, touched, m.created_at, m.id)

    return sorted((m for m in memories if evictable(m)), key=key)


def to_evict(memories: Sequence[Memory], cap: int, now: datetime) -> list[Memory]:
    active = [m for m in memories if m.status is Status.ACTIVE]
    over = len(active) - cap
    return eviction_order(active, now)[:over] if over > 0 else []
