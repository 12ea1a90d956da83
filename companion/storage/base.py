"""The storage seam: what the memory engine needs from a store, as a Protocol.

``SQLiteStore`` (``sqlite.py``) is the one that ships; ``InMemoryStore`` (``inmemory.py``) runs the same
contract in dicts for fast engine tests, and a server database can be added later without touching the
engine: it registers an opener with ``factory.register_backend`` and everything above this package reaches it
through ``factory.open_store(url)`` and the protocols here, never through its module. Optional capabilities
(vectors, the usage log, file-level maintenance) are offered by methods that return None when a backend has no
such thing. Every method is one short unit of work: none spans an LLM or Telegram await, and every method that
reads or writes memories takes the scope it acts for, so one scope's call can never reach another's rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from companion.core.models import Memory, MemoryDraft, Profile, Scope, ShortItem, ShortKind, Status, Turn
from companion.storage.turns import TurnBatch

ACTIVE_ONLY: frozenset[Status] = frozenset({Status.ACTIVE})
EVERY_STATUS: frozenset[Status] = frozenset(Status)


class MemoryStore(TurnBatch, Protocol):
    async def close(self) -> None: ...

    async def change_counter(self) -> int:
        """Changes when a writer other than this store object commits (another process: an operator's
        command line); this object's own writes do not move it. Caches compare it to know they are stale."""
        ...

    # ---- optional capabilities: None where the backend has no such thing ----
    async def open_vectors(self) -> VectorIndex | None:
        """The memory vectors for semantic recall, kept beside the memories (closed by the caller)."""
        ...

    def usage_log(self) -> UsageLog | None:
        """The log of LLM calls (tokens, latency) the operator's usage report reads."""
        ...

    def maintenance(self) -> Maintenance | None:
        """File-level upkeep of a database file: snapshot, background table upgrade."""
        ...

    # ---- scopes ----
    async def scopes(self) -> list[Scope]: ...
    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None: ...
    async def active_scopes(self) -> set[Scope]: ...

    # ---- memories ----
    async def fetch_memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]: ...

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        """The scope's own memories among ``ids``, in any status; other scopes' handles are ignored."""
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

    async def drop_turns(self, scope: Scope, ids: Sequence[int]) -> None:
        """Remove queued turns (they told something the user has since asked to forget)."""
        ...

    async def import_rows(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, *, keep_ids: bool = True
    ) -> list[int]:
        """Write memories with their times as they are (restore): with their handles (which must be
        unused), or with fresh ones in the same order. Returns the handles."""
        ...

    async def count_memories(self) -> int:
        """Active memories over every scope."""
        ...

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        """Daily decay and cleanup of these scopes (the rules of ``core.rules``); (decayed, removed)."""
        ...

    # ---- the extraction queue ----
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

    # ---- short-term memory (turns and today's events, kept across restarts) ----
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

    # ---- profiles ----
    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None: ...
    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None: ...
    async def delete_profile(self, scope: Scope) -> None: ...

    # ---- small state ----
    async def get_meta(self, key: str) -> str | None: ...
    async def set_meta(self, key: str, value: str) -> None: ...

    async def meta_items(self) -> list[tuple[str, str]]:
        """Every small-state (key, value), by key (a copy to another database reads them all)."""
        ...

    # ---- a group chat that changed its id (a group upgraded to a supergroup) ----
    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        """Move everything of every (old chat, user) scope to (new chat, user), each scope atomically:
        memories with their handles, companion mode, queued turns, short-term items, profile, vectors, and
        the small state keyed by the scope (``name:<scope key>``) or by the chat (``name:<chat id>``). What
        the new scope already has wins over the old. Returns the old scopes moved; a second call moves
        nothing (or finishes a move cut short). Writes the ``begin_move`` marker first (if not there yet)
        and removes it with the last step."""
        ...

    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        """Durably note "old -> new is moving" before anything moves; ``move_chat`` clears it when done."""
        ...

    async def unfinished_moves(self) -> list[tuple[int, int]]:
        """The (old, new) chat ids of moves begun and not finished (a crash cut them short)."""
        ...


def moved_suffixes(old_scopes: Iterable[Scope], old_chat_id: int, new_chat_id: int) -> list[tuple[str, str]]:
    """The small-state key endings that follow a chat's move: ``:<scope key>`` per scope, ``:<chat id>``."""
    pairs = [(f":{s.key}", f":{Scope(s.user_id, new_chat_id).key}") for s in old_scopes]
    return [*pairs, (f":{old_chat_id}", f":{new_chat_id}")]


# ---- the vectors capability -------------------------------------------------------------------------


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class VectorRow:
    handle: int
    text_hash: str
    vector: Sequence[float]


class VectorIndex(Protocol):
    """One scope's vectors never meet another's; vectors of one model are never compared with another's."""

    @property
    def backend(self) -> str: ...

    async def close(self) -> None: ...
    async def put(self, scope: Scope, model: str, rows: Sequence[VectorRow], now: datetime) -> int: ...
    async def delete(self, handles: Sequence[int]) -> int: ...
    async def prune(self, scope: Scope | None = None) -> int: ...
    async def drop_other_models(self, model: str) -> int: ...
    async def hashes(self, scope: Scope, model: str) -> dict[int, str]: ...
    async def count(self, model: str | None = None) -> int: ...
    async def nearest(self, scope: Scope, model: str, query: Sequence[float], k: int) -> list[tuple[int, float]]: ...


# ---- the usage-log capability -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One call, as stored. Cache counts are None when the server did not report a split."""

    at: datetime
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int | None
    cache_miss_tokens: int | None
    latency_ms: float
    ok: bool = True
    tool_calls: int = 0


@dataclass(frozen=True, slots=True)
class UsageCell:
    """One (local day, purpose) of the report."""

    day: str  # YYYY-MM-DD, local
    purpose: str
    calls: int
    failures: int
    prompt_tokens: int
    completion_tokens: int
    cache_hit_tokens: int
    cache_miss_tokens: int
    avg_latency_ms: float
    tool_calls: int


class UsageLog(Protocol):
    async def add(self, row: UsageRow) -> None: ...

    async def report(self, since: datetime, offset: timedelta) -> list[UsageCell]:
        """Calls since ``since`` by local day and purpose, oldest day first; days cut at ``offset`` from UTC."""
        ...

    async def page(self, after: int, limit: int) -> list[tuple[int, UsageRow]]:
        """Up to ``limit`` rows in the order they were written, after the row numbered ``after`` (0: from the
        first): (number, row). A copy to another database reads them all."""
        ...


# ---- the maintenance capability (a database file) ---------------------------------------------------


class Maintenance(Protocol):
    """What the backup and the start-up upkeep need of a store kept in one database file."""

    @property
    def path(self) -> Path: ...

    async def snapshot(self, target: Path, *, standalone: bool = True) -> None:
        """A consistent copy of the whole database at ``target``."""
        ...

    async def upgrade_stale(self, limit: int = 50) -> int:
        """Upgrade up to ``limit`` rows of tables left at an old schema; 0 when none is left."""
        ...

    def memory_table(self, scope: Scope) -> str:
        """The table a scope's memories live in (diagnostics: a benchmark tells a spare table taken)."""
        ...
