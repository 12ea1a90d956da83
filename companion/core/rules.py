"""Pure memory rules: decay, expiry, cleanup and the recall rate limit.

Every function takes ``now`` as an argument and touches no clock, database or network, so the rules
are tested with plain tables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from companion.core import dates
from companion.core.models import Memory, MemoryDraft, StatusReason, Tier, Validity, When

DAY = timedelta(days=1)
DECAY_PER_DAY = 0.95
DECAY_PER_DAY_MENTIONED = 0.98
MENTION_WINDOW = timedelta(days=7)
MIN_IMPORTANCE = 0.0
MAX_IMPORTANCE = 100.0
CLEANUP_BELOW = 10.0


def clamp_importance(value: float) -> float:
    if math.isnan(value):
        return MIN_IMPORTANCE
    return max(MIN_IMPORTANCE, min(MAX_IMPORTANCE, value))


def expires_at(created_at: datetime, validity: Validity) -> datetime | None:
    lifetime = validity.lifetime()
    return None if lifetime is None else created_at + lifetime


# How long a memory stays in a tier before the user is asked about it (``core.tiers`` has the rest).
REVIEW_PERIOD: dict[Tier, timedelta] = {
    Tier.SHORT: timedelta(days=7), Tier.MEDIUM: timedelta(days=30), Tier.LONG: timedelta(days=90),
}


def tier_for(validity: Validity) -> Tier:
    """The tier a memory takes when nothing else says: the seed's validity maps one to one."""
    return {Validity.PERMANENT: Tier.LONG, Validity.DAYS_30: Tier.MEDIUM, Validity.DAYS_7: Tier.SHORT}[validity]


def decays(validity: Validity, tier: Tier, pinned: bool) -> bool:
    """Permanent, long-term and pinned memories keep their importance and are never cleaned up."""
    return validity is not Validity.PERMANENT and tier is not Tier.LONG and not pinned


def dated_lifetime(validity: Validity, happens: When | None, created: datetime, now: datetime,
                   ) -> tuple[Validity, datetime | None, datetime]:
    """Validity, expiry and decay anchor of a memory. A dated one lives by its date, not by when it was told:
    a yearly date (a birthday) is lasting; a one-time event expires ``dates.AFTER_END`` after its last day (and
    never sooner than that after it was told) and does not decay before that day has passed (its anchor is the
    day's end), so a trip told five weeks ahead is still there when it comes. Day ends are taken in UTC: at most
    a few hours from the user's own midnight on a week's grace, and the store needs no timezone."""
    anchor = min(created, now)
    if happens is None:
        return validity, expires_at(created, validity), anchor
    if happens.yearly:
        return Validity.PERMANENT, None, anchor
    if validity is Validity.PERMANENT:  # a lasting fact that has a day (started the new job on 3月1日)
        return validity, None, anchor
    # Told after the fact ("上个月去了趟上海"), it still lives a while from the telling: news is worth a week.
    expires = max(dates.expires_at(happens, UTC) or created, created + dates.AFTER_END)
    return validity, expires, max(anchor, dates.end_of_day(dates.last_day(happens), UTC))


def new_memory(draft: MemoryDraft, handle: int, now: datetime) -> Memory:
    """The stored form of a draft: bookkeeping times and counters start here."""
    created = draft.created_at or now
    validity, expires, anchor = dated_lifetime(draft.validity, draft.happens, created, now)
    expires = draft.expires_at if draft.expires_at is not None else expires
    tier = draft.tier or tier_for(validity)
    return Memory(
        id=handle, event=draft.event, keywords=list(draft.keywords), importance=clamp_importance(draft.importance),
        created_at=created, validity=validity, last_mentioned_at=None, updated_at=now,
        expires_at=expires, type=draft.type, origin=draft.origin, mention_count=0,
        last_decay_at=anchor, terms=list(draft.terms), tier=tier,
        pinned=draft.pinned, source_chat_id=draft.source_chat_id, source_message_id=draft.source_message_id,
        source_at=draft.source_at, review_at=now + REVIEW_PERIOD[tier], happens=draft.happens,
    )


def whole_days(since: datetime, now: datetime) -> int:
    return max(0, math.floor((now - since) / DAY))


def decay(
    importance: float,
    validity: Validity,
    last_decay_at: datetime,
    last_mentioned_at: datetime | None,
    now: datetime,
) -> tuple[float, datetime]:
    """Importance after the whole days elapsed since ``last_decay_at``, and the new decay anchor.

    Day i ends at ``last_decay_at + i days``; it decays at the mentioned rate when its end falls within
    seven days after the last mention. Counting whole days makes a catch-up after downtime equal to the
    daily runs it replaces, and a second run on the same day a no-op.
    """
    if validity is Validity.PERMANENT:
        return importance, last_decay_at
    days = whole_days(last_decay_at, now)
    if days == 0:
        return importance, last_decay_at
    slow = _days_in_mention_window(last_decay_at, last_mentioned_at, days)
    factor = DECAY_PER_DAY_MENTIONED**slow * DECAY_PER_DAY ** (days - slow)
    return clamp_importance(importance * factor), last_decay_at + days * DAY


def told_importance(importance: float, validity: Validity, created_at: datetime, last_decay_at: datetime) -> float:
    """The importance a memory had before decay: what recall's floor judges. Decay orders memories and
    ends them (cleanup below ``CLEANUP_BELOW``); whether one is worth bringing up is judged as it was told,
    so a 30-day event of importance 60 stays recallable for its 30 days instead of sinking under a floor of
    50 on its fifth. Undoing the plain rate over every decayed day: exact without mentions, an upper bound
    where a mention slowed the decay."""
    if validity is Validity.PERMANENT:
        return importance
    return clamp_importance(importance / DECAY_PER_DAY ** whole_days(created_at, last_decay_at))


def _days_in_mention_window(anchor: datetime, mentioned: datetime | None, days: int) -> int:
    if mentioned is None:
        return 0
    first = max(1, math.ceil((mentioned - anchor) / DAY))
    last = min(days, math.floor((mentioned + MENTION_WINDOW - anchor) / DAY))
    return max(0, last - first + 1)


def removal_reason(
    importance: float,
    validity: Validity,
    expires: datetime | None,
    last_mentioned_at: datetime | None,
    now: datetime,
) -> StatusReason | None:
    """Why cleanup removes a memory, or None to keep it. Permanent memories are never removed here."""
    if validity is Validity.PERMANENT:
        return None
    if importance < CLEANUP_BELOW:
        return StatusReason.FADED
    expired = expires is not None and expires <= now
    quiet = last_mentioned_at is None or now - last_mentioned_at >= MENTION_WINDOW
    if expired and quiet:
        return StatusReason.EXPIRED
    return None


def recall_allowed(recent_injections: Sequence[bool], max_rate: float, window: int = 10) -> bool:
    """Keep memories to about ``max_rate`` of turns: a turn may carry a memory only while fewer than
    ``max_rate * window`` of the previous ``window`` turns did."""
    return sum(recent_injections[-window:]) < max_rate * window
