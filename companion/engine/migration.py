"""The copy of everything of one store into another (SQLite into PostgreSQL and back, any pair of backends),
through the store protocol only, then verified: ``python bot.py migrate --to URL``, and a restore into a
server database. The operator tools reach it as ``maintenance.MaintenancePort.copy_into``.

Copied per scope: every memory with its handle, times, status, tombstone and the turns it came from,
companion mode, the queued turns, the short-term items, the profile; then the typed settings (switches and
notes), the LLM usage rows and the markers of unfinished chat moves. Safe to re-run: what the target
already holds is not copied again (memories by handle, everything else by value, counted, so duplicates in
the source stay duplicates), and every run ends by comparing counts and a checksum per scope. Not copied:
the semantic vectors (derived: ``bot.py reindex`` rebuilds them) and the change journal (the target's own
starts with the copy). The bot must be stopped meanwhile: a write during the copy fails the verification.
All or nothing for the bot: until the copy is verified the target is marked (``MIGRATING``) and no store is
opened on it but by a copy (``open_store(copying=True)``). Text is copied as it is stored today (``sendable``).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import astuple, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from companion.core.errors import MigrationMismatchError
from companion.core.models import EVERY_STATUS, DynamicTrait, Memory, Profile, Scope, ShortItem, ShortKind, Turn
from companion.core.setting import MIGRATING, SETTINGS, Keyed, Setting
from companion.core.text import sendable
from companion.core.usage import UsageRecord
from companion.storage.base import MemoryStore, UsageLog

# Far above what a scope holds (the short-term buffer keeps 200 turns, the queue drains every few turns).
ALL = 1_000_000
USAGE_PAGE = 5_000

Progress = Callable[[int, int], None]
_SETTINGS = {s.name.value: s for s in SETTINGS}


@dataclass(slots=True)
class Copied:
    """What one run wrote into the target (0 everywhere on a re-run) and what it verified."""

    scopes: int = 0
    memories: int = 0
    turns: int = 0
    short: int = 0
    profiles: int = 0
    meta: int = 0
    usage: int = 0
    moves: int = 0
    verified_scopes: int = 0
    mismatched: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ScopeContent:
    """A scope's records in a form equal across backends (ids of queue and short-term rows left out:
    each database numbers its own)."""

    memories: tuple[tuple[Any, ...], ...]
    sources: tuple[tuple[int, tuple[str, ...]], ...]
    turns: tuple[tuple[Any, ...], ...]
    short: tuple[tuple[Any, ...], ...]
    profile: tuple[Any, ...] | None
    active: bool

    def counts(self) -> tuple[int, int, int]:
        return len(self.memories), len(self.turns), len(self.short)

    def checksum(self) -> str:
        return hashlib.sha256(repr(self).encode("utf-8")).hexdigest()


def _moment(value: object) -> object:
    return value.astimezone(UTC).replace(microsecond=0) if isinstance(value, datetime) else value


def _plain(values: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(_storable(v) for v in values)


def _storable(value: object) -> object:
    """A value as every backend stores it: text as it is made storable where it enters (``sendable``: a NUL
    kept by an older version's SQLite database is refused by PostgreSQL), times to the second in UTC, lists
    as tuples."""
    if isinstance(value, str):
        return sendable(value)
    if isinstance(value, list | tuple):
        return tuple(_storable(v) for v in value)
    return _moment(value)


def storable_memory(memory: Memory) -> Memory:
    return replace(memory, event=sendable(memory.event), keywords=[sendable(k) for k in memory.keywords],
                   terms=[sendable(t) for t in memory.terms])


def storable_profile(profile: Profile) -> Profile:
    return replace(profile, core=sendable(profile.core), dynamic=[
        DynamicTrait(sendable(t.text), tuple(sendable(k) for k in t.keywords)) for t in profile.dynamic])


def storable_turn(turn: Turn) -> Turn:
    return replace(turn, user=sendable(turn.user), reply=_text(turn.reply))


def _text(value: str | None) -> str | None:
    return None if value is None else sendable(value)


def memory_key(memory: Memory) -> tuple[Any, ...]:
    return _plain(astuple(memory))


def turn_key(turn: Turn) -> tuple[Any, ...]:
    return _plain((turn.user, turn.reply, turn.at, turn.chat_id, turn.message_id, turn.key))


def short_key(item: ShortItem) -> tuple[Any, ...]:
    return _plain((item.kind.value, item.user, item.reply, item.at, item.recalled, item.keys))


async def read_scope(store: MemoryStore, scope: Scope, active: bool) -> ScopeContent:
    memories = await store.fetch_memories(scope, EVERY_STATUS)
    turns = await store.pending_turns(scope, ALL)
    short = [i for kind in ShortKind for i in await store.short_items(scope, kind, ALL)]
    loaded = await store.load_profile(scope)
    profile = None
    if loaded is not None and not loaded[1]:  # a stale profile is not copied: the target builds it afresh
        built = loaded[0]
        profile = _plain((built.core, tuple((t.text, t.keywords) for t in built.dynamic), built.built_at))
    told = await store.sources_of(scope, [m.id for m in memories])
    return ScopeContent(tuple(memory_key(m) for m in memories),
                        tuple((h, tuple(sorted(keys))) for h, keys in sorted(told.items())),
                        tuple(turn_key(t) for t in turns),
                        tuple(short_key(i) for i in short), profile, active)


def missing(source: Sequence[Any], target: Sequence[Any], key: Callable[[Any], Hashable]) -> list[Any]:
    """Those of ``source`` the target lacks, counted: two equal source rows need two in the target."""
    have = Counter(key(x) for x in target)
    out = []
    for item in source:
        k = key(item)
        if have[k] > 0:
            have[k] -= 1
        else:
            out.append(item)
    return out


async def copy_scope(source: MemoryStore, target: MemoryStore, scope: Scope, active: bool, now: datetime,
                     copied: Copied) -> None:
    await target.set_active(scope, active, now)  # registers the scope, even one that holds nothing yet
    memories = await source.fetch_memories(scope, EVERY_STATUS)
    present = {m.id for m in await target.fetch_by_ids(scope, [m.id for m in memories])}
    new = [m for m in memories if m.id not in present]
    for memory in new:
        owner = await target.owner_of(memory.id)
        if owner is not None:
            raise MigrationMismatchError(f"handle {memory.id} of {scope.key} belongs to {owner.key} in the target")
    if new:
        told = await source.sources_of(scope, [m.id for m in new])
        await target.import_rows(scope, [storable_memory(m) for m in new], now, keep_ids=True, sources=told)
    copied.memories += len(new)
    for turn in missing(await source.pending_turns(scope, ALL), await target.pending_turns(scope, ALL), turn_key):
        await target.add_turn(scope, storable_turn(turn))
        copied.turns += 1
    for kind in ShortKind:
        items = await source.short_items(scope, kind, ALL)
        for item in missing(items, await target.short_items(scope, kind, ALL), short_key):
            await target.add_short(scope, kind, sendable(item.user), _text(item.reply), item.at, keep=ALL,
                                   recalled=item.recalled, keys=item.keys)
            copied.short += 1
    profile = await source.load_profile(scope)
    if profile is not None and not profile[1] and await target.load_profile(scope) is None:
        await target.save_profile(scope, storable_profile(profile[0]), profile[0].built_at or now)
        copied.profiles += 1


def _typed(name: str, owner: str) -> tuple[Setting[Any, Any], Any]:
    """The setting a stored row belongs to and its key, as ``Setting.owner`` wrote it."""
    setting = _SETTINGS.get(name)
    if setting is None:
        raise MigrationMismatchError(f"the source holds a setting this version does not know: {name!r}")
    if setting.keyed is Keyed.DATABASE:
        return setting, None
    return setting, Scope.from_key(owner) if setting.keyed is Keyed.SCOPE else int(owner)


async def _settings(store: MemoryStore) -> set[tuple[str, str, str]]:
    """The stored settings a copy carries: all but the copy's own marker."""
    return {row for row in await store.all_settings() if row[0] != MIGRATING.name.value}


async def copy_settings(source: MemoryStore, target: MemoryStore) -> int:
    """Every stored setting the target lacks or holds otherwise; how many were written."""
    have = await _settings(target)
    written = 0
    for name, owner, value in sorted(await _settings(source)):
        if (name, owner, value) not in have:
            setting, key = _typed(name, owner)
            await target.set_setting(setting, key, setting.decode(value))
            written += 1
    return written


async def copy_usage(source: UsageLog | None, target: UsageLog | None) -> int:
    if source is None or target is None:
        return 0
    wanted = await _usage_rows(source)
    new = missing(wanted, await _usage_rows(target), _usage_key)
    for row in new:
        await target.add(row)
    return len(new)


async def _usage_rows(log: UsageLog) -> list[UsageRecord]:
    rows: list[UsageRecord] = []
    after = 0
    while page := await log.page(after, USAGE_PAGE):
        rows.extend(row for _, row in page)
        after = page[-1][0]
    return rows


def _usage_key(row: UsageRecord) -> tuple[Any, ...]:
    return _plain(astuple(row))


async def migrate(source: MemoryStore, target: MemoryStore, now: datetime, progress: Progress | None = None) -> Copied:
    """Copy what ``target`` lacks of ``source``, then verify every scope; raises ``MigrationMismatchError``
    (naming the scopes) when the two differ after the copy."""
    copied = Copied()
    # Until the copy is verified the target is marked unfinished, and no engine opens it (``MIGRATING``): a run
    # cut short leaves a database the bot refuses with one line until a second run finishes the copy.
    await target.set_setting(MIGRATING, None, f"started {now.isoformat()}")
    scopes = await source.scopes()
    active = await source.active_scopes()
    known = set(await target.scopes())
    for done, scope in enumerate(scopes, start=1):
        copied.scopes += scope not in known
        await copy_scope(source, target, scope, scope in active, now, copied)
        if progress is not None:
            progress(done, len(scopes))
    copied.meta = await copy_settings(source, target)
    copied.usage = await copy_usage(source.usage_log(), target.usage_log())
    moving = set(await target.unfinished_moves())
    for old, new in await source.unfinished_moves():
        if (old, new) not in moving:
            await target.begin_move(old, new, now)
            copied.moves += 1
    await verify(source, target, copied)
    await target.set_setting(MIGRATING, None, "")
    return copied


async def verify(source: MemoryStore, target: MemoryStore, copied: Copied) -> None:
    """Counts and a checksum per scope, and the small state, usage rows and move markers as a whole."""
    scopes = await source.scopes()
    active = await source.active_scopes()
    target_active = await target.active_scopes()
    missing_scopes = sorted(s.key for s in set(scopes) - set(await target.scopes()))
    copied.mismatched = missing_scopes
    for scope in scopes:
        want = await read_scope(source, scope, scope in active)
        got = await read_scope(target, scope, scope in target_active)
        if want.counts() != got.counts() or want.checksum() != got.checksum():
            copied.mismatched.append(f"{scope.key} (memories, queued turns, short-term: {want.counts()} in the "
                                     f"source, {got.counts()} in the target)")
    copied.verified_scopes = len(scopes) - len(copied.mismatched)
    if await _settings(source) - await _settings(target):
        copied.mismatched.append("settings (switches and notes)")
    if set(await source.unfinished_moves()) - set(await target.unfinished_moves()):
        copied.mismatched.append("unfinished chat moves")
    source_usage, target_usage = source.usage_log(), target.usage_log()
    if source_usage is not None and target_usage is not None and missing(
            await _usage_rows(source_usage), await _usage_rows(target_usage), _usage_key):
        copied.mismatched.append("LLM usage rows")
    if copied.mismatched:
        raise MigrationMismatchError(f"the target differs from the source in {len(copied.mismatched)} place(s): "
                                     + "; ".join(copied.mismatched[:5]))
