"""Plain data types of the memory engine: scopes, memories and drafts. No I/O here."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from enum import StrEnum

from companion.core.errors import InvalidScopeError

WEEKDAYS = "一二三四五六日"


def _month_end(day: date) -> date:
    return (day.replace(day=28) + timedelta(days=4)).replace(day=1) - timedelta(days=1)
# Telegram ids fit in 52 bits; anything larger (or non-numeric) never names a table.
_MAX_ID = 2**53


class Validity(StrEnum):
    PERMANENT = "permanent"
    DAYS_30 = "30d"
    DAYS_7 = "7d"

    def lifetime(self) -> timedelta | None:
        return {Validity.PERMANENT: None, Validity.DAYS_30: timedelta(days=30),
                Validity.DAYS_7: timedelta(days=7)}[self]


class MemoryType(StrEnum):
    PREFERENCE = "preference"
    FACT = "fact"
    INSTRUCTION = "instruction"
    EVENT = "event"


class Origin(StrEnum):
    """How a memory came to be."""

    EXTRACTED = "extracted"  # the model extracted it from the conversation
    EXPLICIT = "explicit"  # the user asked to remember it
    TOOL = "tool"  # the model saved it through a memory tool
    ADMIN = "admin"  # an operator added it
    RESTORE = "restore"  # read back from a backup whose origin is unknown
    DIDA = "dida"  # the user created it as a card on their Dida365 kanban

    @classmethod
    def parse(cls, text: str) -> Origin:
        """Also reads the seed's ``source`` values found in old backups."""
        return _LEGACY_ORIGINS.get(text) or cls(text)


_LEGACY_ORIGINS = {"extraction": Origin.EXTRACTED, "manual": Origin.EXPLICIT, "import": Origin.RESTORE}


class Status(StrEnum):
    """Only active memories are recalled, listed by default or fed to the profile."""

    ACTIVE = "active"
    ARCHIVED = "archived"  # put away by the user or a review; kept in backups, restorable
    SUPERSEDED = "superseded"  # replaced by newer information (``superseded_by``); kept for /why
    FORGOTTEN = "forgotten"  # a content-free tombstone: handle, when and why, no text


ACTIVE_ONLY: frozenset[Status] = frozenset({Status.ACTIVE})
EVERY_STATUS: frozenset[Status] = frozenset(Status)


class StatusReason(StrEnum):
    """Why a memory is archived, superseded or forgotten: the ``status_reason`` stored with it (and in the
    CSV), so the values never change."""

    NONE = ""  # active, or restored by the user
    USER = "user"  # the user (or an operator for them) archived or forgot it
    PROMOTED = "promoted"  # moved up a tier by the user; still active (the weekly summary counts it)
    REPLACED = "replaced"  # superseded by newer information (``superseded_by``)
    # A superseded copy keeping a memory's earlier words, after a retelling in other words rewrote it:
    # ``/why`` shows them and an undo puts them back.
    REWORDED = "reworded"
    UNDONE = "undone"  # a new memory whose save the user undid
    EVICTED = "evicted"  # a small thing dropped to keep the scope under its memory cap
    FADED = "faded"  # cleanup: its importance decayed below the floor
    EXPIRED = "expired"  # cleanup: its validity ran out and nobody mentioned it lately
    DUPLICATE = "duplicate"  # cleanup: another active copy of the same words stays
    DONE = "done"  # an event over and followed up: the user answered how it went (its kanban card completes)


class Switch(StrEnum):
    """A stored on/off setting: the weekly summary, a group's memory, sharing private memories in groups."""

    ON = "on"
    OFF = "off"

    @classmethod
    def of(cls, on: bool) -> Switch:
        return cls.ON if on else cls.OFF


class Tier(StrEnum):
    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


def _checked_id(value: object, what: str, *, allow_negative: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and re.fullmatch(r"-?\d{1,16}", value.strip()):
            value = int(value.strip())
        else:
            raise InvalidScopeError(f"{what} must be an integer, got {value!r}")
    assert isinstance(value, int)
    if not (-_MAX_ID < value < _MAX_ID) or value == 0 or (value < 0 and not allow_negative):
        raise InvalidScopeError(f"{what} out of range: {value}")
    return value


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memories: a user in a private chat, or a user inside one group chat.

    The table name is built only from validated integers, never from free text.
    """

    user_id: int
    chat_id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_id", _checked_id(self.user_id, "user id"))
        if self.chat_id is not None:
            chat = _checked_id(self.chat_id, "chat id", allow_negative=True)
            object.__setattr__(self, "chat_id", None if chat == self.user_id else chat)

    @property
    def key(self) -> str:
        if self.chat_id is None:
            return f"u{self.user_id}"
        sign = "n" if self.chat_id < 0 else "p"
        return f"c{sign}{abs(self.chat_id)}_u{self.user_id}"

    @property
    def table(self) -> str:
        return f"mem_{self.key}"

    @classmethod
    def from_key(cls, key: str) -> Scope:
        match = re.fullmatch(r"u([1-9][0-9]*)|c([np])([1-9][0-9]*)_u([1-9][0-9]*)", key)
        if match is None:
            raise InvalidScopeError(f"not a scope key: {key!r}")
        if match.group(1):
            return cls(int(match.group(1)))
        chat = int(match.group(3)) * (-1 if match.group(2) == "n" else 1)
        return cls(int(match.group(4)), chat)


@dataclass(frozen=True, slots=True)
class When:
    """When a memory happens, as local dates in the user's timezone: a one-day event has ``on`` only, a span
    ``ends`` too, a time of day is optional; a yearly date (a birthday, an anniversary) recurs on ``on``'s
    month and day every year. A lasting fact has no ``When`` at all."""

    on: date
    ends: date | None = None
    at: time | None = None
    yearly: bool = False

    def describe(self) -> str:
        """As people read it: 12月9日（周三）, a span 12月9日-11日 or 12月30日-1月2日, with a time
        12月9日（周三）14:00, a yearly date 每年5月20日."""
        if self.yearly:
            return f"每年{self.on.month}月{self.on.day}日"
        if self.ends is not None and self.ends != self.on:
            if self.on.day == 1 and self.ends == _month_end(self.on):
                return f"{self.on.month}月"
            end = f"{self.ends.day}日" if self.ends.month == self.on.month else f"{self.ends.month}月{self.ends.day}日"
            text = f"{self.on.month}月{self.on.day}日-{end}"
        else:
            text = f"{self.on.month}月{self.on.day}日（周{WEEKDAYS[self.on.weekday()]}）"
        return text + (self.at.strftime("%H:%M") if self.at is not None else "")



@dataclass(slots=True)
class MemoryDraft:
    """A memory about to be written: validated, but without id or bookkeeping times."""

    event: str
    keywords: list[str]
    importance: float
    validity: Validity = Validity.DAYS_30
    type: MemoryType = MemoryType.EVENT
    origin: Origin = Origin.EXTRACTED
    created_at: datetime | None = None
    terms: list[str] = field(default_factory=list)
    tier: Tier | None = None  # None: follow the validity (rules.tier_for)
    pinned: bool = False
    # The message it was learned from (``/why`` links to it where Telegram allows).
    source_chat_id: int | None = None
    source_message_id: int | None = None
    source_at: datetime | None = None
    supersedes: int | None = None  # the handle of the memory this new information replaces
    # Keys of the conversation turns that told it (``Turn.key``): forgetting it drops exactly those turns
    # from the extraction queue and the short-term context, whatever their words.
    source_turns: tuple[str, ...] = ()
    happens: When | None = None  # when it happens (an event, a span, a yearly date); None for a lasting fact
    date_unclear: bool = False  # the words named a day that does not exist (2月30号): saved without one
    # An exact end (a tool's or an import's lifetime in seconds), instead of the one the validity gives.
    expires_at: datetime | None = None


@dataclass(slots=True)
class Memory:
    """One stored memory. ``id`` is its handle: unique across the whole database, so a button, a tool
    call or an admin command can name it and the store can check who owns it."""

    id: int
    event: str
    keywords: list[str]
    importance: float
    created_at: datetime
    validity: Validity
    last_mentioned_at: datetime | None
    updated_at: datetime
    expires_at: datetime | None
    type: MemoryType
    origin: Origin
    mention_count: int
    last_decay_at: datetime
    # Words of the event text, kept so the recall index never re-segments on load; derived, not backed up.
    terms: list[str] = field(default_factory=list)
    status: Status = Status.ACTIVE
    tier: Tier = Tier.MEDIUM
    review_at: datetime | None = None
    last_accessed_at: datetime | None = None
    access_count: int = 0
    pinned: bool = False
    source_chat_id: int | None = None
    source_message_id: int | None = None
    source_at: datetime | None = None
    superseded_by: int | None = None
    status_reason: str = StatusReason.NONE  # why it was archived, superseded or forgotten (StatusReason)
    # A one-way hash of the forgotten event's normal form: a later extraction of the same words can be
    # recognised without keeping the words.
    fingerprint: str = ""
    happens: When | None = None  # when it happens (an event, a span, a yearly date); None for a lasting fact

    @property
    def shown(self) -> str:
        """Its words as people see them: with its date in front, unless the words already name that day."""
        when = self.happens
        if when is None or f"{when.on.month}月{when.on.day}" in self.event:
            return self.event
        return f"{when.describe()}{self.event}"

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def is_active(self) -> bool:
        return self.status is Status.ACTIVE


@dataclass(frozen=True, slots=True)
class Recalled:
    memory: Memory
    score: float
    match: float


@dataclass(slots=True)
class Turn:
    """One exchange: the user's (buffered) text and the companion's reply, if it got one."""

    user: str
    reply: str | None
    at: datetime
    id: int | None = None
    chat_id: int | None = None
    message_id: int | None = None
    # The turn's key: random, content-free, the same in the queue, the short-term context and the
    # provenance of every memory it told (``MemoryDraft.source_turns``). None: a turn without one.
    key: str | None = None


@dataclass(slots=True)
class Profile:
    core: str
    dynamic: list[DynamicTrait] = field(default_factory=list)
    built_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class DynamicTrait:
    text: str
    keywords: tuple[str, ...]


class ShortKind(StrEnum):
    TURN = "turn"  # one exchange of the conversation
    EVENT = "event"  # a small thing the user reported today ("吃了感冒药")


@dataclass(frozen=True, slots=True)
class ShortItem:
    """Short-term memory that survives a restart (kept in the database, not in the process)."""

    id: int
    kind: ShortKind
    user: str
    reply: str | None
    at: datetime
    recalled: bool = False
    # The keys of the turns it holds or came from (``Turn.key``): a turn's own, or for an event every
    # turn of the extraction batch that told it.
    keys: tuple[str, ...] = ()
