"""One conversation's state in the process: its short-term history (each turn with its key), recall
cooldowns, the extraction countdown, and the turns still to be queued for learning; and how forgetting
takes a turn out of all of it at once, so the next reply call never sees it.

The small part another worker process must continue with (the turn count, cooldowns, the injection
window, the extraction countdown) goes to the store with each turn's one write, as ``Session.state``'s
compact JSON, and comes back with the first read of a session new to this process (``Session.resume``).
The history has a store of its own (the short-term turns)."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from companion.chat.requests import SteeringState, scrub
from companion.core.extraction import tells
from companion.core.models import Memory, Turn
from companion.core.turnview import TurnView

log = logging.getLogger(__name__)

INJECTION_WINDOW = 10
UNQUEUED_KEPT = 50
STATE_VERSION = 1  # of ``Session.state``'s JSON: a state of another version is not resumed


class Told(NamedTuple):
    """One turn of the in-process short-term context, with its key (``Turn.key``) so forgetting what it
    told drops it whatever its words."""

    user: str
    reply: str | None
    key: str | None = None
    at: datetime | None = None  # when it was said; None: not known (kept as current)


# Past turns older than this are no longer sent as the conversation: a reply would take talk from days
# ago for what was just said. What they told is in the memories by then (extraction, idle summaries).
HISTORY_MAX_AGE = timedelta(hours=12)


def carried(turn: Told, now: datetime) -> bool:
    """Whether a reply call carries this turn as the conversation: within ``HISTORY_MAX_AGE`` (or of no known age)."""
    return turn.at is None or now - turn.at <= HISTORY_MAX_AGE


def current_turns(history: Sequence[Told], now: datetime) -> list[tuple[str, str | None]]:
    """The turns of ``history`` a reply call carries as the conversation."""
    return [(t.user, t.reply) for t in history if carried(t, now)]


def said_since(history: Sequence[Told], now: datetime) -> datetime | None:
    """When the oldest turn a reply call carries was said; None when not known."""
    return min((t.at for t in history if t.at is not None and carried(t, now)), default=None)


def new_turn_key() -> str:
    """Random and content-free: it names a turn in the queue, the short-term context and provenance."""
    return secrets.token_hex(8)


@dataclass(slots=True)
class Session:
    history: deque[Told]
    extract_at: int
    turn: int = 0
    since_extraction: int = 0
    cooldown: dict[int, int] = field(default_factory=dict)
    injections: deque[bool] = field(default_factory=lambda: deque(maxlen=INJECTION_WINDOW))
    news_turns: dict[str, int] = field(default_factory=dict)
    news_waiting: bool = False
    last_extraction_turn: int | None = None  # the turn of the last extraction started for news
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    steer: SteeringState = field(default_factory=SteeringState)
    message: tuple[int | None, int | None] = (None, None)  # (chat id, message id) of the turn being answered
    summarised_turn: int = 0
    restored: bool = False  # the persisted short-term turns were loaded into ``history``
    forgot_seen: int = 0  # ``TurnView.forgot`` as of the last read: a newer forget means the turns are read again
    answering: str | None = None  # the key of the turn being answered
    # Keys of turns forgotten while they were being answered (a tool's save and forget in one reply, or
    # "forget everything" pressed meanwhile): they are neither kept nor queued when the answer comes.
    dropped: set[str] = field(default_factory=set)
    # Turns the database could not queue for learning (a full disk), oldest first: queued with the next turn.
    unqueued: deque[Turn] = field(default_factory=lambda: deque(maxlen=UNQUEUED_KEPT))
    view: TurnView | None = None  # this turn's read of the store (``MemoryEngine.open_turn``); None: unread
    reviews_looked: bool = False  # this process looked for reviews to raise at the conversation's start
    followups: dict[int, int] = field(default_factory=dict)  # memory handle -> times a reply was cued with it
    written_first: int | None = None  # the memory the last message written first was about, until answered

    def state(self, cooldown_turns: int) -> str:
        """What another process continues with, as compact JSON; a cooldown over (``cooldown_turns`` passed
        since the memory was shown) goes from the session too, so neither grows with the conversation."""
        self.cooldown = {mid: at for mid, at in self.cooldown.items() if self.turn - at < cooldown_turns}
        return json.dumps({
            "v": STATE_VERSION, "turn": self.turn, "cool": {str(mid): at for mid, at in self.cooldown.items()},
            "shown": "".join("1" if shown else "0" for shown in self.injections),
            "since": self.since_extraction, "at": self.extract_at, "last": self.last_extraction_turn,
            "news": self.news_turns, "wait": self.news_waiting,
            **({"fu": {str(mid): n for mid, n in self.followups.items()}} if self.followups else {}),
            **({"wf": self.written_first} if self.written_first is not None else {}),
        }, ensure_ascii=False, separators=(",", ":"))

    def resume(self, state: str | None) -> None:
        """Continue from a ``state`` another process (or this one before a restart) wrote; nothing (None, or
        a state this version cannot read) leaves the session as it is."""
        if not state:
            return
        try:
            found = json.loads(state)
            if found.get("v") != STATE_VERSION:
                return
            turn, cool, shown = int(found["turn"]), found["cool"], str(found["shown"])
            since, at, last = int(found["since"]), int(found["at"]), found["last"]
            news, waiting = found["news"], bool(found["wait"])
            cooldown = {int(mid): int(when) for mid, when in cool.items()}
            news_turns = {str(word): int(when) for word, when in news.items()}
            last_turn = None if last is None else int(last)
            cued = {int(mid): int(n) for mid, n in dict(found.get("fu") or {}).items()}
            written = found.get("wf")
            written_first = None if written is None else int(written)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("a stored conversation state could not be read, starting afresh: %s", type(exc).__name__)
            return
        self.turn, self.cooldown, self.since_extraction, self.extract_at = turn, cooldown, since, at
        self.last_extraction_turn = last_turn
        self.injections.clear()
        self.injections.extend(flag == "1" for flag in shown)
        self.news_turns, self.news_waiting = news_turns, waiting
        self.followups = cued
        self.written_first = written_first

    def forget_everything(self) -> None:
        """Every turn goes, the one being answered too (it is neither kept nor queued)."""
        self.history.clear()
        self.unqueued.clear()
        self.summarised_turn = 0
        if self.answering is not None:
            self.dropped.add(self.answering)

    def forget_unproven(self) -> int:
        """Another process forgot something, known here by handle only: no turn can be shown not to tell it.
        The turns go, to be read again from the store (which that forget scrubbed) at the next turn's open;
        the turns waiting to be queued go too (no store holds them: privacy before learning). Returns how
        many waiting turns went."""
        self.history.clear()
        self.summarised_turn = 0
        self.restored = False
        dropped = len(self.unqueued)
        self.unqueued.clear()
        return dropped

    def forget(self, memories: Sequence[Memory], turn_keys: Collection[str]) -> None:
        """The turns the forgotten memories came from (by key, whatever their words) and the turns whose
        words tell them go from the history and the turns waiting to be queued."""
        if self.answering is not None and self.answering in turn_keys:
            self.dropped.add(self.answering)
        kept = [t for t in scrub(list(self.history), memories) if t.key not in turn_keys]
        self.summarised_turn = min(self.summarised_turn, len(kept))
        self.history.clear()
        self.history.extend(kept)
        waiting = [t for t in self.unqueued if untold(t, memories, turn_keys)]
        self.unqueued.clear()
        self.unqueued.extend(waiting)


def stored_turn(state: str | None) -> int:
    """The turn count a stored conversation state holds (0 when there is none or it cannot be read)."""
    try:
        found = json.loads(state) if state else {}
        return int(found.get("turn", 0)) if isinstance(found, dict) and found.get("v") == STATE_VERSION else 0
    except (ValueError, TypeError):
        return 0


def untold(turn: Turn, memories: Sequence[Memory], turn_keys: Collection[str]) -> bool:
    """Whether a waiting turn stays when these memories are forgotten: it did not tell them (by key or words)."""
    return turn.key not in turn_keys and not any(tells(turn.user, m) for m in memories)
