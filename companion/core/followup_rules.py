"""Follow-ups: which told events the companion should ask about, and which dates to remember on the day.

Pure rules, ``today`` (the user's local date) or ``now`` an argument. A thread is open once an event the user
told about has ended, for ``WINDOW`` after its last day, until it is talked about (a mention after it ended),
or until it was cued ``MAX_CUES`` times without an answer. At most ``MAX_OPEN`` threads are open per scope,
the most important first. A yearly date (a birthday) is cued on its day.

A message the companion writes first (a push) goes out only within the local hours allowed, on a local day the
user has not written yet, at most once a local day, and never after ``MAX_UNANSWERED`` such messages in a row
went unanswered (until the user writes again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta, tzinfo

from companion.core import dates
from companion.core.models import Memory

# How a cue reads in a reply's reference block (every host's): a cue, not something the user just said.
CUE_HEADER = "可以顺便关心的事（这是提示，不是用户刚说的；自然地问一句就好，不要生硬）："
CUE_ENDED = "{memory}——应该已经结束了，可以问问怎么样"
CUE_TODAY = "今天是这个日子：{memory}"

WINDOW = timedelta(days=14)
MAX_OPEN = 3
MAX_CUES = 2
MAX_UNANSWERED = 2


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


def cue_text(memory: Memory, words: str | None = None) -> str:
    """The cue for ``memory`` (``words``: how to name it, its own words by default)."""
    when = memory.happens
    return (CUE_TODAY if when is not None and when.yearly else CUE_ENDED).format(
        memory=memory.shown if words is None else words)


def thread_days(memory: Memory, today: date) -> tuple[date, date] | None:
    """The local days a message about ``memory`` may be written first (both included): the ``WINDOW`` after
    an event's last day, or a yearly date's next day (from ``today``); None for a memory with nothing to
    follow up (undated, or no longer active)."""
    when = memory.happens
    if not memory.is_active or when is None:
        return None
    if when.yearly:
        day = dates.next_occurrence(when, today)
        return day, day
    last = dates.last_day(when)
    return last + timedelta(days=1), last + WINDOW


def still_open(memory: Memory, today: date, tz: tzinfo) -> bool:
    """Whether ``memory`` is a thread to follow up today: a yearly date on its day, or an ended event not
    talked about since (``open_threads``' rule for one memory)."""
    return bool(days_of([memory], today)) or bool(open_threads([memory], today, tz))


def done_when_answered(memory: Memory, today: date) -> bool:
    """Whether answering a follow-up about ``memory`` finishes it: an event whose last day is past (a yearly
    date comes back next year and stays)."""
    when = memory.happens
    return memory.is_active and when is not None and not when.yearly and dates.last_day(when) < today


def within_hours(now: datetime, tz: tzinfo, hours: tuple[int, int]) -> bool:
    """Whether it is a sensible local hour to write to someone (start inclusive, end exclusive)."""
    start, end = hours
    return start <= now.astimezone(tz).hour < end


def may_push(now: datetime, tz: tzinfo, hours: tuple[int, int], last_said: datetime | None,
             sent: Sequence[datetime]) -> bool:
    """Whether the companion may write first now: within ``hours``, the user has not written this local day
    (``last_said``: their last message, None when not known), nothing was written first this local day, and
    fewer than ``MAX_UNANSWERED`` of those written first (``sent``) came after the user's last message."""
    if not within_hours(now, tz, hours):
        return False
    today = now.astimezone(tz).date()
    if last_said is not None and last_said.astimezone(tz).date() >= today:
        return False
    if any(at.astimezone(tz).date() >= today for at in sent):
        return False
    unanswered = [at for at in sent if last_said is None or at > last_said]
    return len(unanswered) < MAX_UNANSWERED
