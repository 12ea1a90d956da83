"""When a hint may go out again: a user outside companion mode who sends 50 messages a second gets one
"how to start" hint, not 50. Pure: the caller passes ``now``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from datetime import datetime, timedelta

HINT_EVERY = timedelta(seconds=30)
REMEMBERED = 10_000  # keys kept; the least recently hinted go first (a forgotten key may get one more hint)


def hint_due(last: datetime | None, now: datetime, every: timedelta = HINT_EVERY) -> bool:
    """Whether a hint may go out: none yet, ``every`` has passed, or the clock went back (a hint is
    never held back for long by a clock that jumped)."""
    return last is None or now - last >= every or now < last


class HintGate:
    """The last hint time per key (a user, or a (group, user) scope), bounded to ``size`` keys."""

    def __init__(self, every: timedelta = HINT_EVERY, size: int = REMEMBERED) -> None:
        self._every, self._size = every, size
        self._last: OrderedDict[Hashable, datetime] = OrderedDict()

    def allow(self, key: Hashable, now: datetime) -> bool:
        """True (and the hint counted as sent at ``now``) when ``key`` may get a hint."""
        if not hint_due(self._last.get(key), now, self._every):
            return False
        self.note(key, now)
        return True

    def due(self, last: datetime | None, now: datetime) -> bool:
        """``hint_due`` at this gate's interval (``last``: a hint another process sent)."""
        return hint_due(last, now, self._every)

    def note(self, key: Hashable, at: datetime) -> None:
        """A hint to ``key`` went out at ``at`` (here, or from another process)."""
        self._last[key] = at
        self._last.move_to_end(key)
        while len(self._last) > self._size:
            self._last.popitem(last=False)
