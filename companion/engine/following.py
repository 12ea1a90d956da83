"""Derived copies follow the change journal: a copy of what a scope's memories say (the profile cache, the
vectors, a chat session's turns, the spool files) registers once as a ``Follower`` and from then on is
told every change of the scope, whoever made it, so a forget reaches it without anyone naming it.

How the news travels:

- In this process, a forget (``MemoryWriter.forget``) writes the store only (tombstones, the turns and
  short-term items that told it, the profile row, the vectors, the journal entries: one transaction) and
  then hands the feed a ``Forgetting``: the memories as they were and the keys of the turns they came
  from. Every follower gets that payload with the scope's new journal entries (``ChangeFeed.forgot``), so
  a copy holding text (a session's turns) scrubs exactly what told the forgotten memories.
- After any other write of this process the writer tells the feed too (``ChangeFeed.catch_up``): the
  entries only, off the reply's path, so the next turn finds the feed current and costs no store call.
- A change made by another process (a worker, the operator's CLI, the kanban sync) reaches the followers
  when a turn reads the scope's change counter (``ChangeFeed.catch_up`` with the counter the turn read):
  a counter past what the feed saw costs one ``changes_since`` read. The journal holds handles, never
  text, so ``News.forgetting`` is None and a follower drops what it can no longer prove clean (a
  session its turns and waiting turns, to be read again from the scrubbed store).

A follower is told in registration order (the chat layer registers its session before its spools, which
mirror the session) and must be idempotent: two catch-ups of one scope at once may tell the same entries
twice. One follower failing does not keep the news from the others; the first failure is raised after all
of them were told.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from companion.core.changes import Change, ChangeOp
from companion.core.models import Memory, Scope
from companion.storage.base import MemoryStore

log = logging.getLogger(__name__)

# Entries read at once. More since the feed last looked: the news is partial, and followers assume the worst.
MAX_NEWS = 500

# Entries whose memory's text is gone (a tombstone): what the user forgot, or cleanup and eviction did.
REMOVED_OPS: frozenset[ChangeOp] = frozenset({ChangeOp.FORGOTTEN, ChangeOp.CLEANED, ChangeOp.EVICTED})


@dataclass(frozen=True, slots=True)
class Forgetting:
    """What one forget took: the memories as they were, and the keys of the turns they came from.
    ``everything``: the whole scope was forgotten (every memory, queued turn and short-term item)."""

    memories: list[Memory]
    turn_keys: frozenset[str]
    everything: bool = False


@dataclass(frozen=True, slots=True)
class News:
    """A scope's new journal entries (oldest first), and what this process knows beyond them: the
    ``forgetting`` it just did (None: the entries are all there is, as for another process's change).
    ``partial``: more entries than were read came in since the feed last looked."""

    scope: Scope
    changes: tuple[Change, ...] = ()
    forgetting: Forgetting | None = None
    partial: bool = False
    _forgotten: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        journal = {c.handle for c in self.changes if c.op is ChangeOp.FORGOTTEN and c.handle is not None}
        told = {m.id for m in self.forgetting.memories} if self.forgetting is not None else set()
        object.__setattr__(self, "_forgotten", frozenset(journal | told))

    @property
    def forgotten(self) -> frozenset[int]:
        """Handles the user (or an operator for them) forgot, by the journal or by this process's payload."""
        return self._forgotten

    @property
    def removed(self) -> frozenset[int]:
        """Handles whose text went: forgotten, cleaned up or evicted."""
        gone = {c.handle for c in self.changes if c.op in REMOVED_OPS and c.handle is not None}
        return self._forgotten | gone

    @property
    def forgot(self) -> bool:
        """Something may have been forgotten: a follower holding text must act."""
        return bool(self._forgotten) or self.forgetting is not None or self.partial

    @property
    def unexplained(self) -> bool:
        """Something was forgotten that the payload does not say in words (another process's forget, or
        entries not all read): a copy that scrubs by words cannot prove itself clean and drops its text."""
        if self.partial:
            return True
        told = {m.id for m in self.forgetting.memories} if self.forgetting is not None else set()
        return bool(self._forgotten - told)


class Follower(Protocol):
    """A derived copy of a scope's memories: told each of the scope's changes once registered
    (``MemoryEngine.follow``). Idempotent; it may raise (the others are told first)."""

    async def follow(self, news: News) -> None: ...


class ChangeFeed:
    """The followers of this process and, per scope, the journal ``seq`` they were told up to. One int a
    scope the process ever saw; a scope seen for the first time is taken as current (a copy of it is made
    after that first look: a turn's open looks before its session is read back)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._followers: list[Follower] = []
        self._seen: dict[Scope, int] = {}

    def register(self, follower: Follower) -> None:
        self._followers.append(follower)

    def unregister(self, follower: Follower) -> None:
        if follower in self._followers:
            self._followers.remove(follower)

    @property
    def followers(self) -> Sequence[Follower]:
        return tuple(self._followers)

    async def forgot(self, scope: Scope, forgetting: Forgetting) -> None:
        """This process forgot: every follower is told, with what was forgotten as it was."""
        changes, partial = await self._read(scope, None)
        await self._tell(News(scope, changes, forgetting, partial))

    async def catch_up(self, scope: Scope, counter: int | None = None) -> None:
        """Tell the followers the scope's entries since they were last told. ``counter``: the scope's change
        counter as the caller read it (a turn's open): nothing to read when it did not move."""
        if counter is not None and self._seen.get(scope, counter) >= counter:
            self._seen.setdefault(scope, counter)
            return
        changes, partial = await self._read(scope, counter)
        if changes or partial:
            await self._tell(News(scope, changes, None, partial))

    async def _read(self, scope: Scope, counter: int | None) -> tuple[tuple[Change, ...], bool]:
        """The entries since the feed last looked, and whether there were more; the feed is current after."""
        seen = self._seen.get(scope)
        if seen is None:
            self._seen[scope] = counter if counter is not None else await self._store.change_counter(scope)
            return (), False
        changes = await self._store.changes_since(scope, seen, MAX_NEWS)
        partial = len(changes) >= MAX_NEWS
        newest = max([seen, *(c.seq for c in changes)])
        if partial:  # the rest is skipped: the followers assume anything went
            newest = max(newest, counter if counter is not None else await self._store.change_counter(scope))
        self._seen[scope] = max(newest, self._seen.get(scope, 0))
        return tuple(changes), partial

    async def _tell(self, news: News) -> None:
        failure: BaseException | None = None
        for follower in tuple(self._followers):
            try:
                await follower.follow(news)
            except Exception as exc:  # the others must hear of a forget whatever one of them does
                log.warning("a derived copy of %s could not follow its changes: %s", news.scope.key, exc)
                failure = failure or exc
        if failure is not None:
            raise failure
