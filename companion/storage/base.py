"""The storage seam: what the memory engine needs from a store, as small Protocols by concern.

``SQLiteStore`` (``sqlite.py``) is the one that ships; ``InMemoryStore`` (``inmemory.py``) runs the same
contract in dicts for fast engine tests, and a server database can be added later without touching the
engine: it registers an opener with ``factory.register_backend`` and everything above this package reaches it
through ``factory.open_store(url)`` and the protocols here, never through its module.

A backend implements every concern (``MemoryStore`` is their combination): the scope registry, memory
records, the change journal, the extraction turn queue, short-term items, profiles, typed settings,
chat moves and the Dida365 kanban's sync state (``KanbanState``, tables of their own: ``kanban.py``).
Code that needs one concern types against that Protocol alone. The optional capabilities (vectors, the
usage log, file-level maintenance: ``capabilities``) are methods of ``Capabilities`` that return None
where a backend has no such thing. Every method is one short unit of work: none spans an LLM
or Telegram await, and every method that reads or writes memories takes the scope it acts for, so one
scope's call can never reach another's rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta, tzinfo
from typing import Protocol, TypeVar

from companion.core.cells import CellColumn
from companion.core.changes import Change
from companion.core.models import (
    ACTIVE_ONLY,
    EVERY_STATUS,
    Memory,
    MemoryDraft,
    Profile,
    Scope,
    ShortItem,
    ShortKind,
    Status,
    Turn,
)
from companion.core.setting import Setting
from companion.core.usage import UsageCell
from companion.storage.capabilities import (
    Maintenance,
    UsageLog,
    VectorIndex,
    VectorRow,
    text_hash,
)
from companion.storage.records import JOURNAL_KEEP, FollowUpScope, Thread
from companion.storage.turns import TurnBatch, TurnRecord

# The typed settings, the journal's entries and ``TurnView`` are data the layers above share with the store:
# they live in ``companion.core`` (``setting``, ``journal``, ``turnview``) and are imported from there. So do
# the status sets and the usage report's cells (``core.models``, ``core.usage``), re-exported here for storage.
__all__ = [
    "ACTIVE_ONLY", "EVERY_STATUS", "JOURNAL_KEEP", "STREAM_BATCH", "Capabilities", "ChangeJournal", "ChatMoves",
    "FollowUpScope", "FollowUpState", "KanbanState", "Maintenance", "MemoryRecords", "MemoryStore", "ProfileStore",
    "ScopeRegistry", "SettingStore", "ShortTermItems", "Thread", "TurnBatch", "TurnQueue", "TurnRecord", "UsageCell",
    "UsageLog", "VectorIndex", "VectorRow", "text_hash",
]

STREAM_BATCH = 500  # memories per batch of ``stream_memories``: one short read each
CELL_BATCH = 5000  # rows per read of ``stream_csv``: a backup of a million rows in 200 reads

K = TypeVar("K")
V = TypeVar("V")


class ScopeRegistry(Protocol):
    """The scopes ever written, and which are in companion mode."""

    async def scopes(self) -> list[Scope]: ...
    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None: ...
    async def active_scopes(self) -> set[Scope]: ...


class MemoryRecords(Protocol):
    """A scope's memories. Every change of a memory's content or status writes the change journal
    (``ChangeJournal``) in the same transaction; recording an access or a mention does not."""

    async def fetch_memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]: ...

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        """The scope's own memories among ``ids``, in any status; other scopes' handles are ignored."""
        ...

    def stream_memories(
        self, scopes: Sequence[Scope] | None = None, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[tuple[Scope, list[Memory]]]:
        """Every memory in every status of ``scopes`` (of every scope with None, in key order), each scope's
        in handle order, in batches of at most ``batch``; each batch is one short read, so a backup or an
        export of any size never holds a transaction or the whole database in memory."""
        ...

    def stream_csv(
        self, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None, tail: Sequence[str] = (), *,
        batch: int = CELL_BATCH,
    ) -> AsyncIterator[tuple[Scope, str, int]]:
        """Every memory in every status of every scope as one line of CSV: what the csv module's default
        writer makes of the cells ``core.cells.memory_cells`` gives it followed by ``tail`` (``offset``: the
        zone's fixed UTC offset, or None). Each scope's lines come one after another in handle order (the
        scopes in any order), in chunks of one scope's lines: (scope, lines, how many). Each read is short
        and fetches up to ``batch`` rows, of several scopes if need be. A store may render the lines itself
        (in SQL), so a backup of a million rows needs few round trips and little Python per row."""
        ...

    async def owner_of(self, handle: int) -> Scope | None:
        """Whose memory a handle names, or None for a handle never issued."""
        ...

    async def apply_changes(
        self, scope: Scope, now: datetime, inserts: Sequence[MemoryDraft] = (), updates: Sequence[Memory] = (),
        forget: Iterable[int] = (), reason: str = "user", sources: Sequence[str] = (),
    ) -> list[int]:
        """Insert, update and forget memories of one scope atomically; returns the new handles. Forgetting
        leaves a content-free tombstone. Any change marks the scope's profile stale. ``sources``: the keys
        of the turns every inserted and updated memory came from (``Turn.key``)."""
        ...

    async def forget_everywhere(
        self, scope: Scope, ids: Sequence[int] | None, now: datetime, reason: str = "user", *,
        queued: Sequence[int] = (), short: Sequence[int] = (),
    ) -> set[str]:
        """Forget memories (every one of the scope with ``ids=None``) and whatever could bring them back,
        all or nothing: content-free tombstones, the profile, the queued turns and the short-term items
        the memories came from (by turn key, whatever their words) and those named by id in ``queued``
        and ``short``; with ``ids=None`` every queued turn and short-term item of the scope. A scope never
        seen creates nothing. Returns the keys of the turns the memories came from."""
        ...

    async def forgotten_turns(self, scope: Scope, keys: Collection[str]) -> set[str]:
        """Those of ``keys`` that a memory the user asked to forget came from."""
        ...

    async def mark_mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None: ...

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        """Record an access (recalled, searched, listed): ``last_accessed_at`` and ``access_count``."""
        ...

    async def import_rows(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, *, keep_ids: bool = True,
        sources: Mapping[int, Collection[str]] | None = None,
    ) -> list[int]:
        """Write memories with their times as they are (restore): with their handles (which must be
        unused), or with fresh ones in the same order. ``sources``: the turn keys each came from, by the
        handle it has in ``memories`` (a copy from another database keeps what forgetting follows).
        Returns the handles."""
        ...

    async def sources_of(self, scope: Scope, ids: Sequence[int]) -> dict[int, set[str]]:
        """The keys of the turns each of the scope's memories ``ids`` came from (``apply_changes``'
        ``sources``); memories without any are left out, other scopes' handles ignored."""
        ...

    async def count_memories(self) -> int:
        """Active memories over every scope."""
        ...

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        """Daily decay and cleanup of these scopes (the rules of ``core.rules``); (decayed, removed). A
        scope whose importances decayed gets one ``DECAYED`` journal entry, each memory cleanup removed
        one ``CLEANED`` entry."""
        ...


class ChangeJournal(Protocol):
    """The append-only journal of memory changes, written in the transaction of each change: the per-scope
    change counter caches compare (``change_counter``), and the outbox a sync to another system or a
    server backend's cache invalidation reads (``changes_since``). Pruned by age in the daily cleanup."""

    async def change_counter(self, scope: Scope) -> int:
        """The newest journal ``seq`` of the scope, or 0 when it has none: it moves on every change of the
        scope's memories, whoever made it (this store object, another process)."""
        ...

    async def changes_since(self, scope: Scope, after: int, limit: int) -> list[Change]:
        """The scope's entries with ``seq > after``, oldest first, at most ``limit``."""
        ...

    async def changes_after(self, after: int, limit: int) -> list[Change]:
        """The entries of every scope with ``seq > after``, oldest first, at most ``limit``: what a copy kept
        over all scopes (the follow-up threads) catches up with. A server database may commit an entry after
        one with a higher ``seq``: a reader re-reads the last minute's entries."""
        ...

    async def prune_changes(self, before: datetime) -> int:
        """Drop entries older than ``before``, except each scope's newest; returns how many went."""
        ...


class TurnQueue(Protocol):
    """Finished turns waiting for extraction."""

    async def add_turn(self, scope: Scope, turn: Turn) -> int: ...
    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]: ...
    async def scopes_with_pending(self) -> list[Scope]: ...
    async def count_pending(self, scope: Scope) -> int: ...

    async def consume_turns(
        self, scope: Scope, up_to_id: int, now: datetime, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
        sources: Sequence[str] = (),
    ) -> list[int]:
        """Write extracted memories and drop the turns they came from, atomically; ``sources`` as in
        ``apply_changes``."""
        ...

    async def clear_turns(self, scope: Scope) -> None: ...

    async def drop_turns(self, scope: Scope, ids: Sequence[int]) -> None:
        """Remove queued turns (they told something the user has since asked to forget)."""
        ...


class ShortTermItems(Protocol):
    """Short-term memory (turns and today's events), kept across restarts."""

    async def add_short(
        self, scope: Scope, kind: ShortKind, user: str, reply: str | None, at: datetime, *, keep: int,
        recalled: bool = False, keys: Sequence[str] = (),
    ) -> None:
        """Append one item (``keys``: the turns it holds or came from); only the newest ``keep`` of its
        kind stay."""
        ...

    async def short_items(self, scope: Scope, kind: ShortKind, limit: int) -> list[ShortItem]:
        """The newest ``limit`` items of a kind, oldest first."""
        ...

    async def drop_short(self, scope: Scope, ids: Sequence[int] | None = None, kind: ShortKind | None = None) -> None:
        """Drop items by id, or all of a kind, or everything of the scope."""
        ...


class ProfileStore(Protocol):
    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None: ...
    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None: ...
    async def delete_profile(self, scope: Scope) -> None: ...


class SettingStore(Protocol):
    """Typed settings (``core.setting.SETTINGS``), each value keyed by a scope, a chat, a user or nothing."""

    async def get_setting(self, setting: Setting[K, V], key: K) -> V | None:
        """The stored value, or None when it was never set."""
        ...

    async def set_setting(self, setting: Setting[K, V], key: K, value: V) -> None: ...

    async def all_settings(self) -> list[tuple[str, str, str]]:
        """Every stored value as (name, owner, value), as ``Setting.owner`` and ``Setting.encode`` wrote
        them, sorted: a copy to another database reads them all."""
        ...


class ChatMoves(Protocol):
    """A group chat that changed its id (a group upgraded to a supergroup)."""

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """Move everything of every (old chat, user) scope to (new chat, user), each scope atomically:
        memories with their handles, companion mode, queued turns, short-term items, profile, vectors, the
        scope's settings and the chat's settings that follow it (``Setting.follows_chat``); what the new
        scope already has wins over the old. Each moved scope, old and new, gets a ``MOVED_CHAT`` journal
        entry. Returns the old scopes moved; a second call moves nothing (or finishes a move cut short).
        Writes the ``begin_move`` marker first (if not there yet) and removes it with the last step."""
        ...

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        """Durably note "old -> new is moving" before anything moves; ``move_chat`` clears it when done."""
        ...

    async def unfinished_moves(self) -> list[tuple[int, int]]:
        """The (old, new) chat ids of moves begun and not finished (a crash cut them short)."""
        ...


class KanbanState(Protocol):
    """What the Dida365 kanban keeps per linked user, as text it encodes itself: the link (``None`` removes
    it with every card row of the user) and one row per synced memory handle (``None`` removes that row)."""

    async def dida_link(self, user_id: int) -> str | None: ...
    async def put_dida_link(self, user_id: int, data: str | None) -> None: ...
    async def dida_users(self) -> list[int]: ...
    async def dida_cards(self, user_id: int) -> dict[int, str]: ...
    async def put_dida_cards(self, user_id: int, cards: Mapping[int, str | None]) -> None: ...


class FollowUpState(Protocol):
    """The follow-up threads (``records.Thread``): dates and flags per told event, derived by the engine from
    the memories; a tombstoned memory's thread goes in the forget's own transaction."""

    async def put_threads(self, scope: Scope, dates: Mapping[int, tuple[date, date] | None]) -> None:
        """Each handle's thread now spans these local days (new days: it may go out again; a stop stays), or
        is closed (None: the memory is no longer an active dated one)."""
        ...

    async def threads_of(self, scope: Scope) -> list[Thread]: ...

    async def due_threads(self, today: date, day_start: datetime, limit: int) -> list[Thread]:
        """Open threads not sent yet whose days include ``today``, of private scopes in companion mode whose
        user may be written to first today (``day_start``: the local day's first moment): follow-ups not
        off, none written first since ``day_start``, the user silent since ``day_start``, and not two
        written first since the user last said something. One indexed read over every scope."""
        ...

    async def stale_threads(self, before: date, limit: int) -> list[Thread]:
        """Open threads whose last day is before ``before`` (to close, or to move to a yearly date's next day)."""
        ...

    async def mark_thread(self, scope: Scope, handle: int, *, pushed_at: datetime | None = None,
                          answered: bool | None = None, stopped: bool | None = None) -> bool:
        """Set what is given (None: as it is); False when the scope has no thread for ``handle``. A
        ``pushed_at`` is also the scope's newest follow-up written first (``FollowUpScope.sent``), in the
        same transaction."""
        ...

    async def followup_scope(self, scope: Scope) -> FollowUpScope: ...

    async def set_followups_off(self, scope: Scope, off: bool) -> None: ...

    async def thread_counts(self) -> dict[str, int]:
        """Over every scope: follow-ups ``sent``, ``answered`` and ``stopped``."""
        ...


class Capabilities(Protocol):
    """Optional capabilities: None where the backend has no such thing."""

    async def open_vectors(self) -> VectorIndex | None:
        """The memory vectors for semantic recall, kept beside the memories (closed by the caller)."""
        ...

    def usage_log(self) -> UsageLog | None:
        """The log of LLM calls (tokens, latency) the operator's usage report reads."""
        ...

    def maintenance(self) -> Maintenance | None:
        """File-level upkeep of a database file: snapshot, background table upgrade."""
        ...


class MemoryStore(
    ScopeRegistry, MemoryRecords, ChangeJournal, TurnQueue, ShortTermItems, ProfileStore, SettingStore, ChatMoves,
    TurnBatch, KanbanState, FollowUpState, Capabilities, Protocol,
):
    """Everything a backend implements; hosts that need one concern type against its Protocol instead."""

    async def close(self) -> None: ...
