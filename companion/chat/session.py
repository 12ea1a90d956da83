"""One conversation's state in the process: its short-term history (each turn with its key), recall
cooldowns, the extraction countdown, and the turns still to be queued for learning; and how forgetting
takes a turn out of all of it at once, so the next reply call never sees it."""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from companion.chat.steering import SteeringState, scrub
from companion.core.extraction import tells
from companion.core.models import Memory, Turn

INJECTION_WINDOW = 10
UNQUEUED_KEPT = 50


class Told(NamedTuple):
    """One turn of the in-process short-term context, with its key (``Turn.key``) so forgetting what it
    told drops it whatever its words."""

    user: str
    reply: str | None
    key: str | None = None


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
    last_extraction_turn: int | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    steer: SteeringState = field(default_factory=SteeringState)
    message: tuple[int | None, int | None] = (None, None)  # (chat id, message id) of the turn being answered
    summarised_turn: int = 0
    restored: bool = False  # the persisted short-term turns were loaded into ``history``
    answering: str | None = None  # the key of the turn being answered
    # Keys of turns forgotten while they were being answered (a tool's save and forget in one reply, or
    # "forget everything" pressed meanwhile): they are neither kept nor queued when the answer comes.
    dropped: set[str] = field(default_factory=set)
    # Turns the database could not queue for learning (a full disk), oldest first: queued with the next turn.
    unqueued: deque[Turn] = field(default_factory=lambda: deque(maxlen=UNQUEUED_KEPT))

    def forget_everything(self) -> None:
        """Every turn goes, the one being answered too (it is neither kept nor queued)."""
        self.history.clear()
        self.unqueued.clear()
        self.summarised_turn = 0
        if self.answering is not None:
            self.dropped.add(self.answering)

    def forget(self, memories: Sequence[Memory], turn_keys: Collection[str]) -> None:
        """The turns the forgotten memories came from (by key, whatever their words) and the turns whose
        words tell them go from the history and the turns waiting to be queued."""
        if self.answering is not None and self.answering in turn_keys:
            self.dropped.add(self.answering)
        kept = [t for t in scrub(list(self.history), memories) if t.key not in turn_keys]
        self.summarised_turn = min(self.summarised_turn, len(kept))
        self.history.clear()
        self.history.extend(kept)
        waiting = [t for t in self.unqueued
                   if t.key not in turn_keys and not any(tells(t.user, m) for m in memories)]
        self.unqueued.clear()
        self.unqueued.extend(waiting)
