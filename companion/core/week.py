"""What the opt-in weekly summary says about a scope's last seven days: a pure rule over its memories, so
the Telegram bot and the AstrBot plugin tell the same week."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from companion.core.models import Memory, Status, StatusReason

WEEK = timedelta(days=7)


@dataclass(frozen=True, slots=True)
class WeekSummary:
    learned: list[Memory]
    promoted: int
    archived: int
    evicted: int


def summarise_week(memories: Iterable[Memory], now: datetime) -> WeekSummary:
    """``memories``: the scope's memories in every status (archived and evicted ones are counted)."""
    everything = list(memories)
    since = now - WEEK
    return WeekSummary(
        learned=[m for m in everything if m.is_active and m.created_at >= since],
        promoted=sum(m.is_active and m.status_reason == StatusReason.PROMOTED and m.updated_at >= since
                     for m in everything),
        archived=sum(m.status is Status.ARCHIVED and m.updated_at >= since for m in everything),
        evicted=sum(m.status_reason == StatusReason.EVICTED and m.updated_at >= since for m in everything),
    )
