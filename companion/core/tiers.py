"""Pure rules of the memory tiers: review times, reminder leads, priority, review suggestions, tier
moves, what a reply may know, and capacity eviction. Every function takes ``now``; nothing here does I/O.

A tier says how often a memory is reviewed, whether it decays and may be evicted, and whether it is
always loaded; it never says whether a memory may be recalled (every active memory may). Moving a memory
up never shortens its life: it takes the longer of its validity and the new tier's (``VALIDITY_OF``: a
long-term memory is permanent, a medium-term one lasts 30 days, a short-term one 7 days). Only the user
moves a memory down, and that is a decision about its life: it takes the lower tier's validity from then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from companion.core import dates
from companion.core.models import Memory, MemoryType, Status, Tier, Validity
from companion.core.rules import REVIEW_PERIOD, expires_at, tier_for

REMINDER_LEAD: dict[Tier, timedelta] = {
    Tier.SHORT: timedelta(hours=9), Tier.MEDIUM: timedelta(days=1), Tier.LONG: timedelta(days=7),
}
VALIDITY_OF: dict[Tier, Validity] = {Tier.SHORT: Validity.DAYS_7, Tier.MEDIUM: Validity.DAYS_30,
                                     Tier.LONG: Validity.PERMANENT}
ORDER = (Tier.SHORT, Tier.MEDIUM, Tier.LONG)
TIER_BONUS = {Tier.SHORT: 0, Tier.MEDIUM: 1, Tier.LONG: 2}
PROMOTE_AFTER_USES = 2  # recalled or mentioned this often during its period: suggest promoting
UNANSWERED_AFTER = timedelta(days=3)

MEDIUM_LOADED = 5
SHORT_LOADED = 2
CORE_IMPORTANCE = 70.0  # a lasting fact or preference this important is core (health 80-100, life events 70-90)


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
    """Whether to ask the user about it now. A one-time event still ahead is not asked about: keeping the trip
    is not a question before the trip (its review waits until its last day has passed)."""
    when = remind_at(memory)
    return (memory.is_active and not memory.pinned and when is not None and when <= now
            and not upcoming(memory, now))


def upcoming(memory: Memory, now: datetime) -> bool:
    """A one-time event whose last day has not passed (days in UTC, as ``rules.dated_lifetime`` takes them)."""
    return memory.happens is not None and not memory.happens.yearly and dates.is_ahead(memory.happens, now.date())


def priority(importance: float, tier: Tier) -> int:
    """0-5: importance in fifths (0-3), plus the tier's weight (0-2), capped at 5."""
    return min(5, int(min(max(importance, 0.0), 100.0) // 25) + TIER_BONUS[tier])


def next_tier(tier: Tier) -> Tier:
    return ORDER[min(ORDER.index(tier) + 1, len(ORDER) - 1)]


def lasts_longer(a: Validity, b: Validity) -> bool:
    """Whether validity ``a`` keeps a memory longer than ``b``."""
    la, lb = a.lifetime(), b.lifetime()
    return lb is not None and (la is None or la > lb)


def move_to_tier(memory: Memory, tier: Tier, now: datetime) -> Memory:
    """The memory in ``tier`` from ``now``, its review restarted. Up or sideways, its life is kept or
    lengthened: the longer of its validity and the tier's, expiring no earlier than it did. Down (only the
    user moves a memory down) it takes the lower tier's validity from now."""
    target = VALIDITY_OF[tier]
    down = ORDER.index(tier) < ORDER.index(memory.tier)
    if down or lasts_longer(target, memory.validity):
        validity, expiry = target, expires_at(now, target)
    else:
        validity, renewed = memory.validity, expires_at(now, memory.validity)
        expiry = None if memory.expires_at is None or renewed is None else max(memory.expires_at, renewed)
    return replace(memory, tier=tier, validity=validity, expires_at=expiry, review_at=review_at(tier, now),
                   updated_at=now)


def keep_for_another_period(memory: Memory, now: datetime) -> Memory:
    return replace(memory, review_at=review_at(memory.tier, now), updated_at=now)


def initial_tier(mtype: MemoryType, importance: float, core: bool = False,
                 validity: Validity | None = None) -> Tier:
    """Where a memory belongs by its nature, the same judgement for an explicit save and for extraction:
    a lasting core fact or preference, and every instruction, long-term; important information
    medium-term; the rest short-term. ``validity`` is the extraction's judgement of how long the memory
    matters: a permanent fact or preference of importance >= ``CORE_IMPORTANCE`` is core ("对花生过敏"), and
    a memory never starts in a tier longer than its validity (a 7-day note stays short-term; "这周别提考试"
    is no standing instruction, though it applies to every reply while it lasts)."""
    if validity is Validity.PERMANENT and importance >= CORE_IMPORTANCE and mtype is not MemoryType.EVENT:
        core = True
    if core or mtype is MemoryType.INSTRUCTION or (mtype is MemoryType.PREFERENCE and importance >= 60):
        tier = Tier.LONG
    else:
        tier = Tier.MEDIUM if importance >= 50 or mtype is MemoryType.FACT else Tier.SHORT
    if validity is not None and not core:
        tier = min(tier, tier_for(validity), key=ORDER.index)
    return tier


@dataclass(frozen=True, slots=True)
class Suggestion:
    action: Action
    reason: str  # Chinese, shown to the user


def suggest(memory: Memory, now: datetime) -> Suggestion:
    """What to do with a memory at its review: promote what came up often during its period, archive
    what was never used, keep the rest for another period. A date decides first: a yearly day (a birthday)
    is worth keeping for good, a one-time event that is over is done with."""
    if memory.happens is not None:
        if memory.happens.yearly:
            if memory.tier is not Tier.LONG:
                return Suggestion(Action.PROMOTE, "每年都有的日子")
            return Suggestion(Action.KEEP, "每年都有的日子")
        if upcoming(memory, now):  # asked by the user's /review before its day
            return Suggestion(Action.KEEP, "日子还没到")
        return Suggestion(Action.ARCHIVE, "这件事已经过去了")
    uses = memory.mention_count + memory.access_count
    period = REVIEW_PERIOD[memory.tier]
    if uses >= PROMOTE_AFTER_USES and memory.tier is not Tier.LONG:
        return Suggestion(Action.PROMOTE, f"这段时间提到了{uses}次")
    used_lately = any(t is not None and now - t <= period for t in (memory.last_mentioned_at,
                                                                      memory.last_accessed_at))
    if uses == 0 or not used_lately:
        return Suggestion(Action.ARCHIVE, "这段时间一次都没用上")
    return Suggestion(Action.KEEP, "偶尔会用到")


def by_priority(memories: Iterable[Memory]) -> list[Memory]:
    """Highest priority first, then the most important, then the newest."""
    return sorted(memories, key=lambda m: (-priority(m.importance, m.tier), -m.importance, -m.id))


def always_loaded(memories: Iterable[Memory]) -> list[Memory]:
    """What is loaded at the start of every conversation: every long-term memory, the 5 medium-term ones
    of highest priority and the 2 newest short-term ones (instructions apart: they always apply). This
    is what the profile is built from first; recall is not limited to it."""
    rest = [m for m in memories if m.is_active and m.type is not MemoryType.INSTRUCTION]
    long = by_priority(m for m in rest if m.tier is Tier.LONG)
    medium = by_priority(m for m in rest if m.tier is Tier.MEDIUM)
    short = sorted((m for m in rest if m.tier is Tier.SHORT), key=lambda m: (m.created_at, m.id), reverse=True)
    return [*long, *medium[:MEDIUM_LOADED], *short[:SHORT_LOADED]]


def instructions(memories: Iterable[Memory]) -> list[Memory]:
    """The standing instructions, which apply to every reply."""
    return [m for m in memories if m.is_active and m.type is MemoryType.INSTRUCTION]


def evictable(memory: Memory) -> bool:
    return memory.is_active and not memory.pinned and memory.tier is not Tier.LONG


def eviction_order(memories: Sequence[Memory], now: datetime) -> list[Memory]:
    """Who goes first when a scope is over its cap: expired, then what is not an event still to come (a plan
    must not be pushed out by chatter before its day), then lowest importance, then least recently accessed,
    then oldest. Pinned and long-term memories are never evicted."""
    never = datetime.min.replace(tzinfo=now.tzinfo)

    def key(m: Memory) -> tuple[bool, bool, float, datetime, datetime, int]:
        touched = m.last_accessed_at or m.last_mentioned_at or never
        return (not m.is_expired(now), upcoming(m, now), m.importance, touched, m.created_at, m.id)

    return sorted((m for m in memories if evictable(m)), key=key)


def to_evict(memories: Sequence[Memory], cap: int, now: datetime) -> list[Memory]:
    active = [m for m in memories if m.status is Status.ACTIVE]
    over = len(active) - cap
    return eviction_order(active, now)[:over] if over > 0 else []
