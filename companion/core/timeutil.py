"""UTC storage format and local-time display. Everything stored is UTC; local time is for people."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from functools import lru_cache

_STORED = "%Y-%m-%dT%H:%M:%SZ"
_SHOWN = "%Y-%m-%d %H:%M"


def utcnow() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def to_db(moment: datetime) -> str:
    """Fixed-width UTC text, so that string order is time order inside SQLite."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: attach a timezone before storing")
    return _stamp(moment)


@lru_cache(maxsize=1024)
def _stamp(moment: datetime) -> str:
    # A write stamps each row with the same few moments (now, its expiry, its review): strftime was a
    # tenth of a bulk write's CPU. Equal aware datetimes are the same instant, so the same text.
    return moment.astimezone(UTC).strftime(_STORED)


def from_db(text: str) -> datetime:
    return datetime.strptime(text, _STORED).replace(tzinfo=UTC)


def show(moment: datetime | None, tz: tzinfo) -> str:
    """Local wall time for people: ``2025-12-23 16:05``; empty for no value."""
    return "" if moment is None else moment.astimezone(tz).strftime(_SHOWN)


def local_date(moment: datetime, tz: tzinfo) -> str:
    return moment.astimezone(tz).strftime("%Y-%m-%d")
