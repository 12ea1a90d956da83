"""Follow-ups: which told events the companion should ask about, and which dates to remember on the day.

Pure rules, ``today`` (the user's local date) an argument. A thread is open once an event the user told about
has ended, for ``WINDOW`` after its last day, until it is talked about (a mention after it ended), or until
it was cued ``MAX_CUES`` times without an answer. At most ``MAX_OPEN`` threads are open per scope, the most
important first. A yearly date (a birthday) is cued on its day.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, timedelta, tzinfo

from companion.core import dates
from companion.core.models import Memory

WINDOW = timedelta(days=14)
MAX_OPEN = 3
MAX_CUES = 2


def open_threads(memories: Iterable[Memory], today: date, tz: tzinfo) -> list[Memory]:
    """The events ended within ``WINDOW`` (before today) and not talked about since, most important first."""
    threads: list[Memory] = []
    for memory in memories:
        when = memory.happens
        if not memory.is_active or when is None or when.yearly:
            continue
        last = dates.last_day(when)
        if not last < today <= last + WINDOW:
            continue
        mentioned = memory.last_mentioned_at
        if mentioned is not None and mentioned >= dates.end_of_day(last, tz):
            continue  # talked about since it ended: the thread is done
        threads.append(memory)
    threads.sort(key=lambda m: (-m.importance, m.id))
    return threads[:MAX_OPEN]


def days_of(memories: Iterable[Memory], today: date) -> list[Memory]:
    """Yearly dates that fall on ``today``."""
    return [m for m in memories if m.is_active and m.happens is not None and m.happens.yearly
            and dates.next_occurrence(m.happens, today) == today]


def cue(memories: Iterable[Memory], today: date, tz: tzinfo, cued: Mapping[int, int]) -> Memory | None:
    """The one memory a conversation's first reply follows up: today's yearly date first, then the most
    important open thread, skipping what was cued ``MAX_CUES`` times already."""
    found = list(memories)
    for memory in [*days_of(found, today), *open_threads(found, today, tz)]:
        if cued.get(memory.id, 0) < MAX_CUES:
            return memory
    return None
