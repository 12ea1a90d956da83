"""``MemoryStore`` in plain dicts: the same contract as ``SQLiteStore`` for fast engine tests, and the
reference the SQL decay is checked against (it applies ``core.rules`` row by row)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, tzinfo
from typing import TypeVar

from companion.core import rules
from companion.core.cells import CellColumn
from companion.core.changes import Change, ChangeOp
from companion.core.errors import StorageError
from companion.core.extraction import fingerprint
from companion.core.models import (
    Memory,
    MemoryDraft,
    Profile,
    Scope,
    ShortItem,
    ShortKind,
    Status,
    StatusReason,
    Turn,
)
from companion.core.setting import Setting
from companion.core.timeutil import utcnow
from companion.core.turnview import TurnView
from companion.storage.base import ACTIVE_ONLY, CELL_BATCH, STREAM_BATCH, Maintenance, UsageLog, VectorIndex
from companion.storage.cellsql import csv_of
from companion.storage.inmemory_threads import InMemoryThreads
from companion.storage.records import CHAT_SETTINGS_THAT_MOVE, SCOPE_SETTINGS, change_op, drops_events, forget_op
from companion.storage.rows import renumbered
from companion.storage.turns import TurnRecord, setting_fields, setting_keys

K = TypeVar("K")
V = TypeVar("V")


class InMemoryStore(InMemoryThreads):
    """Implements ``MemoryStore``; nothing survives ``close``. Returned objects are copies, as rows are."""

    def __init__(self) -> None:
        super().__init__()
        self._scopes: dict[Scope, bool] = {}  # scope -> companion mode on
        self._memories: dict[Scope, dict[int, Memory]] = {}
        self._owners: dict[int, Scope] = {}
        self._turns: dict[Scope, list[Turn]] = {}
        self._profiles: dict[Scope, tuple[Profile, bool]] = {}
        self._settings: dict[tuple[str, str], str] = {}  # (name, owner) -> value, as stored
        self._changes: list[Change] = []  # the journal, oldest first
        self._counters: dict[Scope, int] = {}  # each scope's newest seq
        self._next_seq = 1
        self._moving: dict[int, int] = {}  # old chat id -> new: moves begun, not finished
        self._next_handle = 1
        self._next_turn = 1
        self._short: dict[Scope, list[ShortItem]] = {}
        self._next_short = 1
        self._sources: dict[int, set[str]] = {}  # memory handle -> the keys of the turns it came from
        self._editing: dict[Scope, int] = {}  # scope -> the memory an "edit" press waits on
        self._conversations: dict[Scope, str] = {}  # scope -> its host's conversation state
        self._hinted: dict[Scope, datetime] = {}  # scope -> when its last hint went out
        self._forgets: dict[Scope, int] = {}  # scope -> forgets so far (``TurnView.forgot``)
        self._dida_links: dict[int, str] = {}
        self._dida_cards: dict[int, dict[int, str]] = {}

    async def close(self) -> None:
        return None

    # ---- the change journal ----
    def _journal(self, scope: Scope, entries: Iterable[tuple[int | None, ChangeOp]], now: datetime) -> None:
        entries = list(entries)
        for handle, op in entries:
            self._changes.append(Change(self._next_seq, scope, handle, op, now))
            self._counters[scope] = self._next_seq
            self._next_seq += 1
        self._end_threads(scope, entries)

    async def change_counter(self, scope: Scope) -> int:
        return self._counters.get(scope, 0)

    async def changes_since(self, scope: Scope, after: int, limit: int) -> list[Change]:
        return [c for c in self._changes if c.scope == scope and c.seq > after][: max(limit, 0)]

    async def changes_after(self, after: int, limit: int) -> list[Change]:
        return [c for c in self._changes if c.seq > after][: max(limit, 0)]

    async def prune_changes(self, before: datetime) -> int:
        kept = [c for c in self._changes if c.at >= before or self._counters[c.scope] == c.seq]
        gone = len(self._changes) - len(kept)
        self._changes = kept
        return gone

    async def open_vectors(self) -> VectorIndex | None:
        return None

    def usage_log(self) -> UsageLog | None:
        return None

    def maintenance(self) -> Maintenance | None:
        return None

    def _ensure(self, scope: Scope) -> dict[int, Memory]:
        self._scopes.setdefault(scope, False)
        return self._memories.setdefault(scope, {})

    def _dirty(self, scope: Scope) -> None:
        if scope in self._profiles:
            self._profiles[scope] = (self._profiles[scope][0], True)

    # ---- scopes ----
    async def scopes(self) -> list[Scope]:
        return sorted(self._scopes, key=lambda s: s.key)

    async def set_active(self, scope: Scope, active: bool, now: datetime) -> None:
        self._ensure(scope)
        self._scopes[scope] = active

    async def active_scopes(self) -> set[Scope]:
        return {scope for scope, on in self._scopes.items() if on}

    # ---- memories ----
    async def fetch_memories(self, scope: Scope, statuses: Collection[Status] = ACTIVE_ONLY) -> list[Memory]:
        rows = self._memories.get(scope, {})
        return [replace(m) for _, m in sorted(rows.items()) if m.status in statuses]

    async def fetch_by_ids(self, scope: Scope, ids: Sequence[int]) -> list[Memory]:
        rows = self._memories.get(scope, {})
        return [replace(rows[i]) for i in sorted(set(ids)) if i in rows]

    async def stream_memories(
        self, scopes: Sequence[Scope] | None = None, *, batch: int = STREAM_BATCH
    ) -> AsyncIterator[tuple[Scope, list[Memory]]]:
        for scope in await self.scopes() if scopes is None else scopes:
            rows = sorted(self._memories.get(scope, {}).items())
            for start in range(0, len(rows), batch):
                yield scope, [replace(m) for _, m in rows[start:start + batch]]

    def stream_csv(
        self, columns: Sequence[CellColumn], tz: tzinfo, offset: timedelta | None, tail: Sequence[str] = (), *,
        batch: int = CELL_BATCH,
    ) -> AsyncIterator[tuple[Scope, str, int]]:
        return csv_of(self.stream_memories(batch=batch), columns, tz, tail)

    async def owner_of(self, handle: int) -> Scope | None:
        return self._owners.get(handle)

    async def apply_changes(
        self, scope: Scope, now: datetime, inserts: Sequence[MemoryDraft] = (), updates: Sequence[Memory] = (),
        forget: Iterable[int] = (), reason: str = "user", sources: Sequence[str] = (),
    ) -> list[int]:
        if not inserts and not updates and (not forget or scope not in self._scopes):
            return []  # as SQLiteStore: forgetting in a scope never written creates nothing
        rows = self._ensure(scope)
        ids = self._insert(scope, inserts, now)
        entries: list[tuple[int | None, ChangeOp]] = [(i, ChangeOp.ADDED) for i in ids]
        for memory in updates:
            if memory.id in rows:
                before = rows[memory.id]
                entries.append((memory.id, change_op(before.status, before.tier.value, memory)))
                # As the SQL stores: the usage counts are the row's own, whatever the update carried.
                rows[memory.id] = replace(
                    memory, importance=rules.clamp_importance(memory.importance),
                    last_mentioned_at=before.last_mentioned_at, mention_count=before.mention_count,
                    last_accessed_at=before.last_accessed_at, access_count=before.access_count)
        for mid in [*ids, *(m.id for m in updates if m.id in rows)]:
            self._sources.setdefault(mid, set()).update(k for k in sources if k)
        gone = 0
        for mid in sorted(set(forget)):
            found = rows.get(mid)
            if found is not None and found.status is not Status.FORGOTTEN:
                rows[mid] = _tombstone(found, now, reason, fingerprint(found.event))
                entries.append((mid, forget_op(reason)))
                gone += 1
        self._journal(scope, entries, now)
        if ids or updates or gone:
            self._dirty(scope)
        return ids

    def _insert(self, scope: Scope, drafts: Sequence[MemoryDraft], now: datetime) -> list[int]:
        rows = self._ensure(scope)
        ids = []
        for draft in drafts:
            handle = self._next_handle
            self._next_handle += 1
            self._owners[handle] = scope
            rows[handle] = rules.new_memory(draft, handle, now)
            ids.append(handle)
        return ids

    async def mark_mentioned(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        rows = self._memories.get(scope, {})
        for mid in ids:
            if mid in rows:
                rows[mid].last_mentioned_at = now
                rows[mid].mention_count += 1

    async def touch(self, scope: Scope, ids: Sequence[int], now: datetime) -> None:
        rows = self._memories.get(scope, {})
        for mid in ids:
            if mid in rows:
                rows[mid].last_accessed_at = now
                rows[mid].access_count += 1

    async def forget_everywhere(
        self, scope: Scope, ids: Sequence[int] | None, now: datetime, reason: str = "user", *,
        queued: Sequence[int] = (), short: Sequence[int] = (),
    ) -> set[str]:
        rows = self._memories.get(scope, {})
        wanted = sorted(mid for mid in (rows if ids is None else set(ids))
                        if mid in rows and rows[mid].status is not Status.FORGOTTEN)
        keys = {k for mid in wanted for k in self._sources.get(mid, ())}
        # Checked before anything changes: the call is all or nothing, as the SQLite store's transaction.
        stones = {mid: _tombstone(rows[mid], now, reason, fingerprint(rows[mid].event)) for mid in wanted}
        if ids is None:
            self._turns.pop(scope, None)
            self._short.pop(scope, None)
            self._journal(scope, [(None, ChangeOp.EVENTS)], now)
        else:
            gone_turns, gone_short = set(queued), set(short)
            self._turns[scope] = [t for t in self._turns.get(scope, [])
                                  if t.id not in gone_turns and (t.key is None or t.key not in keys)]
            items = self._short.get(scope, [])
            if gone_short or any(keys.intersection(r.keys) for r in items):
                self._journal(scope, [(None, ChangeOp.EVENTS)], now)
            self._short[scope] = [r for r in items if r.id not in gone_short and not keys.intersection(r.keys)]
        rows.update(stones)
        self._journal(scope, [(mid, forget_op(reason)) for mid in wanted], now)
        if stones or ids is None:
            self._profiles.pop(scope, None)
        if scope in self._scopes:
            self._forgets[scope] = self._forgets.get(scope, 0) + 1
        return keys

    async def forgotten_turns(self, scope: Scope, keys: Collection[str]) -> set[str]:
        rows = self._memories.get(scope, {})
        stones = [mid for mid, m in rows.items() if m.status is Status.FORGOTTEN and m.status_reason == "user"]
        return {k for mid in stones for k in self._sources.get(mid, ())} & set(keys)

    async def drop_turns(self, scope: Scope, ids: Sequence[int]) -> None:
        gone = set(ids)
        self._turns[scope] = [t for t in self._turns.get(scope, []) if t.id not in gone]

    async def import_rows(
        self, scope: Scope, memories: Sequence[Memory], now: datetime, *, keep_ids: bool = True,
        sources: Mapping[int, Collection[str]] | None = None,
    ) -> list[int]:
        rows = self._ensure(scope)
        if not keep_ids:
            handles = [self._next_handle + i for i in range(len(memories))]
            sources = renumbered(sources, memories, handles)
            memories = [replace(m, id=h) for m, h in zip(memories, handles, strict=True)]
        clash = [m.id for m in memories if m.id in self._owners]
        if clash:
            raise StorageError(f"handles already used: {clash[:5]}")
        for memory in memories:
            self._owners[memory.id] = scope
            rows[memory.id] = replace(memory)
            self._next_handle = max(self._next_handle, memory.id + 1)
        for handle, keys in (sources or {}).items():
            self._sources.setdefault(handle, set()).update(k for k in keys if k)
        self._journal(scope, [(m.id, ChangeOp.IMPORTED) for m in memories], now)
        return [m.id for m in memories]

    async def sources_of(self, scope: Scope, ids: Sequence[int]) -> dict[int, set[str]]:
        rows = self._memories.get(scope, {})
        return {mid: set(self._sources[mid]) for mid in ids if mid in rows and self._sources.get(mid)}

    async def count_memories(self) -> int:
        return sum(m.is_active for rows in self._memories.values() for m in rows.values())

    async def decay_and_clean(self, scopes: Sequence[Scope], now: datetime) -> tuple[int, int]:
        decayed = removed = 0
        for scope in scopes:
            rows = self._memories.get(scope, {})
            before = {mid for mid, m in rows.items() if m.status is Status.FORGOTTEN}
            decayed_here = 0
            for mid, m in list(rows.items()):
                if not (m.is_active and rules.decays(m.validity, m.tier, m.pinned)):
                    continue
                value, anchor = rules.decay(m.importance, m.validity, m.last_decay_at, m.last_mentioned_at, now)
                if anchor != m.last_decay_at:
                    decayed_here += 1
                    rows[mid] = m = replace(m, importance=value, last_decay_at=anchor)
                reason = rules.removal_reason(m.importance, m.validity, m.expires_at, m.last_mentioned_at, now)
                if reason is not None:
                    rows[mid] = _tombstone(m, now, reason, "")
            self._drop_duplicates(rows, now)
            cleaned = sorted(mid for mid, m in rows.items() if m.status is Status.FORGOTTEN and mid not in before)
            self._journal(scope, [(mid, ChangeOp.CLEANED) for mid in cleaned], now)
            if decayed_here:
                self._journal(scope, [(None, ChangeOp.DECAYED)], now)
            decayed, removed = decayed + decayed_here, removed + len(cleaned)
            if cleaned:
                self._dirty(scope)
        return decayed, removed

    @staticmethod
    def _drop_duplicates(rows: dict[int, Memory], now: datetime) -> int:
        best: dict[str, Memory] = {}
        for m in rows.values():
            top = best.get(m.event)
            if m.is_active and (top is None or (m.importance, m.id) > (top.importance, top.id)):
                best[m.event] = m
        removed = 0
        for mid, m in list(rows.items()):
            if m.is_active and rules.decays(m.validity, m.tier, m.pinned) and best[m.event].id != mid:
                rows[mid] = _tombstone(m, now, StatusReason.DUPLICATE, "")
                removed += 1
        return removed

    # ---- the extraction queue ----
    async def add_turn(self, scope: Scope, turn: Turn) -> int:
        self._ensure(scope)
        turn = replace(turn, id=self._next_turn)
        self._next_turn += 1
        self._turns.setdefault(scope, []).append(turn)
        return turn.id or 0

    async def pending_turns(self, scope: Scope, limit: int) -> list[Turn]:
        return [replace(t) for t in self._turns.get(scope, [])[:limit]]

    async def scopes_with_pending(self) -> list[Scope]:
        return sorted((s for s, turns in self._turns.items() if turns), key=lambda s: s.key)

    async def count_pending(self, scope: Scope) -> int:
        return len(self._turns.get(scope, []))

    async def consume_turns(
        self, scope: Scope, up_to_id: int, now: datetime, inserts: Sequence[MemoryDraft], updates: Sequence[Memory],
        sources: Sequence[str] = (),
    ) -> list[int]:
        ids = await self.apply_changes(scope, now, inserts, updates, sources=sources)
        self._turns[scope] = [t for t in self._turns.get(scope, []) if (t.id or 0) > up_to_id]
        return ids

    async def clear_turns(self, scope: Scope) -> None:
        self._turns.pop(scope, None)

    # ---- one turn's read and write ----
    async def turn_context(self, scope: Scope, *, events: int, turns: int = 0, memories: bool = False) -> TurnView:
        return TurnView(
            change=await self.change_counter(scope), active=self._scopes.get(scope, False),
            profile=self._profiles.get(scope), events=await self.short_items(scope, ShortKind.EVENT, events),
            turns=await self.short_items(scope, ShortKind.TURN, turns),
            memories=await self.fetch_memories(scope) if memories else None, editing=self._editing.get(scope),
            conversation=self._conversations.get(scope), hinted_at=self._hinted.get(scope),
            forgot=self._forgets.get(scope, 0),
            **setting_fields([None if owner is None else self._settings.get((name, owner))
                              for name, owner in setting_keys(scope)]),
        )

    async def set_editing(self, scope: Scope, handle: int | None) -> None:
        if handle is None:
            self._editing.pop(scope, None)
        else:
            self._editing[scope] = handle

    async def set_hinted(self, scope: Scope, at: datetime) -> None:
        self._hinted[scope] = at

    async def record_turn(self, scope: Scope, record: TurnRecord) -> None:
        # Nothing here can fail half-way: each step is a change to a dict.
        if record.short is not None:
            turn = record.short
            await self.add_short(scope, ShortKind.TURN, turn.user, turn.reply, turn.at, keep=record.keep,
                                 recalled=record.recalled, keys=() if turn.key is None else (turn.key,))
        for queued in record.queued:
            await self.add_turn(scope, queued)
        await self.touch(scope, record.touched, record.at)
        await self.mark_mentioned(scope, record.mentioned, record.at)
        if record.conversation:
            self._conversations[scope] = record.conversation
        elif record.conversation is not None:
            self._conversations.pop(scope, None)
        if record.conversation is not None and record.said_at is not None:
            self._said[scope] = record.said_at

    def _active(self, scope: Scope) -> bool:
        return self._scopes.get(scope, False)

    # ---- short-term memory ----
    async def add_short(
        self, scope: Scope, kind: ShortKind, user: str, reply: str | None, at: datetime, *, keep: int,
        recalled: bool = False, keys: Sequence[str] = (),
    ) -> None:
        rows = self._short.setdefault(scope, [])
        rows.append(ShortItem(self._next_short, kind, user, reply, at, recalled, tuple(keys)))
        if kind is ShortKind.EVENT:
            self._journal(scope, [(None, ChangeOp.EVENTS)], at)
        self._next_short += 1
        mine = [r for r in rows if r.kind is kind]
        drop = {r.id for r in mine[: max(0, len(mine) - keep)]}
        self._short[scope] = [r for r in rows if r.id not in drop]

    async def short_items(self, scope: Scope, kind: ShortKind, limit: int) -> list[ShortItem]:
        mine = [r for r in self._short.get(scope, []) if r.kind is kind]
        return mine[-limit:] if limit > 0 else []

    async def drop_short(self, scope: Scope, ids: Sequence[int] | None = None, kind: ShortKind | None = None) -> None:
        gone = set(ids or ())
        self._short[scope] = [r for r in self._short.get(scope, [])
                              if not (r.id in gone or (ids is None and (kind is None or r.kind is kind)))]
        if drops_events(ids, kind):
            self._journal(scope, [(None, ChangeOp.EVENTS)], utcnow())

    # ---- profiles ----
    async def load_profile(self, scope: Scope) -> tuple[Profile, bool] | None:
        return self._profiles.get(scope)

    async def save_profile(self, scope: Scope, profile: Profile, built_at: datetime) -> None:
        self._ensure(scope)
        self._profiles[scope] = (replace(profile, built_at=built_at), False)

    async def delete_profile(self, scope: Scope) -> None:
        self._profiles.pop(scope, None)

    # ---- typed settings: stored as text, as a database stores them ----
    async def get_setting(self, setting: Setting[K, V], key: K) -> V | None:
        value = self._settings.get((setting.name.value, setting.owner(key)))
        return None if value is None else setting.decode(value)

    async def set_setting(self, setting: Setting[K, V], key: K, value: V) -> None:
        self._settings[(setting.name.value, setting.owner(key))] = setting.encode(value)

    async def all_settings(self) -> list[tuple[str, str, str]]:
        return [(name, owner, value) for (name, owner), value in sorted(self._settings.items())]

    def _move_settings(self, names: Sequence[str], old_owner: str, new_owner: str) -> None:
        for name in names:
            if (name, old_owner) in self._settings:
                self._settings.setdefault((name, new_owner), self._settings.pop((name, old_owner)))

    # ---- a group chat that changed its id ----
    async def begin_move(self, old_chat_id: int, new_chat_id: int, now: datetime) -> None:
        self._moving.setdefault(old_chat_id, new_chat_id)

    async def unfinished_moves(self) -> list[tuple[int, int]]:
        return list(self._moving.items())

    async def move_chat(self, old_chat_id: int, new_chat_id: int, now: datetime) -> list[Scope]:
        await self.begin_move(old_chat_id, new_chat_id, now)
        olds = sorted((s for s in self._scopes if s.chat_id == old_chat_id), key=lambda s: s.key)
        for old in olds:
            new = Scope(old.user_id, new_chat_id)
            self._ensure(new).update(self._memories.pop(old, {}))
            self._scopes[new] = self._scopes[new] or self._scopes.pop(old)
            self._scopes.pop(old, None)
            self._owners.update({handle: new for handle, owner in self._owners.items() if owner == old})
            self._turns[new] = sorted([*self._turns.get(new, []), *self._turns.pop(old, [])], key=lambda t: t.id or 0)
            self._short[new] = sorted([*self._short.get(new, []), *self._short.pop(old, [])], key=lambda r: r.id)
            if old in self._profiles:
                profile = self._profiles.pop(old)
                self._profiles.setdefault(new, (profile[0], True))
            self._move_settings(SCOPE_SETTINGS, old.key, new.key)
            for moved in (old, new):
                self._journal(moved, [(None, ChangeOp.MOVED_CHAT)], now)
        self._move_settings(CHAT_SETTINGS_THAT_MOVE, str(old_chat_id), str(new_chat_id))
        self._moving.pop(old_chat_id, None)
        return olds


    # ---- the Dida365 kanban's sync state ----

    async def dida_link(self, user_id: int) -> str | None:
        return self._dida_links.get(user_id)

    async def put_dida_link(self, user_id: int, data: str | None) -> None:
        if data is None:
            self._dida_links.pop(user_id, None)
            self._dida_cards.pop(user_id, None)
        else:
            self._dida_links[user_id] = data

    async def dida_users(self) -> list[int]:
        return sorted(self._dida_links)

    async def dida_cards(self, user_id: int) -> dict[int, str]:
        return dict(self._dida_cards.get(user_id, {}))

    async def put_dida_cards(self, user_id: int, cards: Mapping[int, str | None]) -> None:
        mine = self._dida_cards.setdefault(user_id, {})
        for handle, data in cards.items():
            if data is None:
                mine.pop(handle, None)
            else:
                mine[handle] = data


def _tombstone(memory: Memory, now: datetime, reason: str, print_: str) -> Memory:
    return replace(memory, event="", keywords=[], terms=[], happens=None, importance=0.0, status=Status.FORGOTTEN,
                   status_reason=reason, fingerprint=print_, updated_at=now, superseded_by=None)
