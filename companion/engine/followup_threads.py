"""Follow-up threads kept beside the memories: which told events a message written first may be about, found
for every user by one indexed read, and what became of each (sent, answered, stopped).

The threads are a derived copy of the memories' dates. They follow the change journal, as the recall index
does: ``catch_up`` reads the entries written since it last looked (over every scope, in pages) and puts the
dates of the memories they name; a tombstone's thread went in the forget's own transaction already. Nothing
here holds words, and nothing here decides when a message may go out (``core.followups``, the host's job).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta, tzinfo

import prompts
from companion.core import followup_rules as followups
from companion.core.changes import ChangeOp
from companion.core.models import Memory, Scope, Status, StatusReason
from companion.core.setting import FOLLOWUP_SEQ
from companion.core.timeutil import show
from companion.engine.writer import MemoryWriter
from companion.storage.base import EVERY_STATUS, FollowUpScope, MemoryStore
from companion.storage.base import Thread as Thread  # the hosts' type of a thread

log = logging.getLogger(__name__)

PAGE = 2000  # journal entries read at once
DUE_LIMIT = 1000  # threads a round looks at; the rest wait for the next round
AT_ONCE = 4  # follow-ups composed and sent at the same time in one round
# A server database may commit an entry after one with a higher seq: the cursor stays this far behind,
# so such an entry is read on the next round (reading an entry twice changes nothing).
SETTLE = timedelta(minutes=1)
# Entries that never change a memory's dates or status: the daily decay, today's events.
NO_DATES = frozenset({ChangeOp.DECAYED, ChangeOp.EVENTS})


@dataclass(frozen=True, slots=True)
class DueFollowUp:
    """A thread to write about now, with its memory as it stands."""

    thread: Thread
    memory: Memory
    first: bool = False  # nothing was ever written first to this user (the message says how to stop them)


class FollowUps:
    def __init__(self, store: MemoryStore, tz: tzinfo, writer: MemoryWriter) -> None:
        self._store = store
        self._tz = tz
        self._writer = writer  # a followed-up event that is over is archived through it (journal, index)

    async def catch_up(self, now: datetime) -> int:
        """Bring the threads up to the change journal; the first time, from every memory. Returns how many
        journal entries were read."""
        cursor = await self._store.get_setting(FOLLOWUP_SEQ, None)
        if cursor is None:
            await self._rebuild(now)
            cursor = 0
        today = now.astimezone(self._tz).date()
        read = 0
        settled = cursor
        while True:
            page = await self._store.changes_after(cursor, PAGE)
            if not page:
                break
            read += len(page)
            whole: set[Scope] = set()
            named: dict[Scope, set[int]] = defaultdict(set)
            for change in page:
                if change.op in NO_DATES:
                    continue
                if change.handle is None:
                    whole.add(change.scope)
                else:
                    named[change.scope].add(change.handle)
            for scope in whole:
                await self._put_scope(scope, today)
            for scope, handles in named.items():
                if scope not in whole:
                    await self._put(scope, sorted(handles), today)
            cursor = page[-1].seq
            settled = max([settled, *(c.seq for c in page if c.at <= now - SETTLE)])
            if len(page) < PAGE:
                break
        await self._store.set_setting(FOLLOWUP_SEQ, None, settled)
        return read

    async def _rebuild(self, now: datetime) -> None:
        today = now.astimezone(self._tz).date()
        async for scope, memories in self._store.stream_memories():
            days = {m.id: followups.thread_days(m, today) for m in memories if m.happens is not None}
            await self._store.put_threads(scope, {h: d for h, d in days.items() if d is not None})

    async def _put(self, scope: Scope, handles: Sequence[int], today: date) -> None:
        """Each named memory's days, or a close where it has none now (closing a thread never made is a no-op)."""
        found = {m.id: m for m in await self._store.fetch_by_ids(scope, handles)}
        await self._store.put_threads(scope, {
            h: followups.thread_days(found[h], today) if h in found else None for h in handles})

    async def _put_scope(self, scope: Scope, today: date) -> None:
        """A scope-wide change (a group's move): its threads are its memories' again."""
        memories = {m.id: m for m in await self._store.fetch_memories(scope, EVERY_STATUS)}
        days = {h: followups.thread_days(m, today) for h, m in memories.items() if m.happens is not None}
        for thread in await self._store.threads_of(scope):
            days.setdefault(thread.handle, None)
        await self._store.put_threads(scope, days)

    async def due(self, now: datetime) -> list[DueFollowUp]:
        """The threads to follow up today over every scope, each with its memory, checked against the memory
        as it is now (still active, still dated so, not talked about since it ended): the journal is read
        first, so a memory forgotten, archived or answered a moment ago is never among them."""
        await self.catch_up(now)
        today = now.astimezone(self._tz).date()
        await self._refresh_stale(today)
        day_start = datetime.combine(today, time(0), tzinfo=self._tz)
        threads = await self._store.due_threads(today, day_start, DUE_LIMIT)
        by_scope: dict[Scope, list[Thread]] = defaultdict(list)
        for thread in threads:
            by_scope[thread.scope].append(thread)
        due: list[DueFollowUp] = []
        for scope, mine in by_scope.items():
            memories = {m.id: m for m in await self._store.fetch_by_ids(scope, [t.handle for t in mine])}
            done: dict[int, tuple[date, date] | None] = {}
            for thread in mine:
                memory = memories.get(thread.handle)
                if memory is not None and memory.status is Status.ACTIVE and followups.still_open(
                        memory, today, self._tz):
                    due.append(DueFollowUp(thread, memory))
                else:  # talked about since it ended, or no longer a memory to ask about: the thread is done
                    done[thread.handle] = None
            await self._store.put_threads(scope, done)
        return due

    async def to_write(self, now: datetime, hours: tuple[int, int], *, only: Scope | None = None
                       ) -> list[DueFollowUp]:
        """What to write first now, for every host: within the local ``hours``, one thread per user who may be
        written to (``core.followups.may_push``), the most important; ``only``: that scope's alone."""
        if not followups.within_hours(now, self._tz, hours):
            return []
        chosen: dict[Scope, DueFollowUp | None] = {}
        for item in sorted(await self.due(now), key=lambda d: (d.thread.scope.key, -d.memory.importance, d.memory.id)):
            scope = item.thread.scope
            if scope in chosen or only not in (None, scope):
                continue
            gate = await self.state(scope)
            writable = not gate.off and followups.may_push(now, self._tz, hours, gate.said_at, gate.sent)
            chosen[scope] = replace(item, first=not gate.sent) if writable else None
        return [item for item in chosen.values() if item is not None]

    async def round(self, now: datetime, hours: tuple[int, int], write: Callable[[DueFollowUp], Awaitable[bool]],
                    *, at_once: int = AT_ONCE, only: Scope | None = None) -> int:
        """One follow-up round, the same for every host: ``write`` (the host's: compose, then ``deliver``) for
        each of ``to_write``, ``at_once`` at a time (a round with many due waits on the model, not on one user
        after another). Returns how many went out; an error of one is raised after the others finished."""
        gate = asyncio.Semaphore(at_once)

        async def one(item: DueFollowUp) -> bool:
            async with gate:
                return await write(item)

        results = await asyncio.gather(*map(one, await self.to_write(now, hours, only=only)), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):  # the others went out; the caller's job wrapper logs this one
                raise result
        return sum(bool(r) for r in results)

    async def deliver(self, scope: Scope, handle: int, now: datetime, send: Callable[[], Awaitable[bool]]) -> bool:
        """Record the message written first about ``handle`` (``sent``), then ``send`` it: at most once, whatever
        happens after. False when the memory was forgotten while the model wrote, or the host could not send."""
        if not await self.sent(scope, handle, now):
            return False
        return await send()

    async def _refresh_stale(self, today: date) -> None:
        """Threads whose days are over close; a yearly date's moves to its next day."""
        stale = await self._store.stale_threads(today, DUE_LIMIT)
        by_scope: dict[Scope, list[int]] = defaultdict(list)
        for thread in stale:
            by_scope[thread.scope].append(thread.handle)
        for scope, handles in by_scope.items():
            found = {m.id: m for m in await self._store.fetch_by_ids(scope, handles)}
            days = {}
            for handle in handles:
                memory = found.get(handle)
                span = followups.thread_days(memory, today) if memory is not None else None
                days[handle] = span if span is not None and span[1] >= today else None
            await self._store.put_threads(scope, days)

    def prompt(self, memory: Memory, now: datetime) -> str:
        """What a host asks its model for to write first about ``memory`` (``prompts/followup.md``); the memory's
        words quoted as data, the cue as the conversation's first reply would carry it."""
        words = json.dumps(memory.shown.replace("【", "[").replace("】", "]"), ensure_ascii=False)
        return prompts.render("followup", now_local=show(now, self._tz), memory=words,
                              cue=followups.cue_text(memory, "这件事"))

    async def threads(self, scope: Scope) -> list[Thread]:
        return await self._store.threads_of(scope)

    async def cue(self, scope: Scope, memories: Iterable[Memory], now: datetime,
                  cued: Mapping[int, int]) -> Memory | None:
        """The one memory a conversation's first reply follows up (``core.followups.cue``; ``cued``: how
        often each was cued so far), never one the user stopped, a thread written first counting as a cue.
        Reads the threads only when there is something to cue; a group's memories are never followed up."""
        if scope.chat_id is not None:
            return None
        today = now.astimezone(self._tz).date()
        found = list(memories)
        if followups.cue(found, today, self._tz, cued) is None:
            return None
        counts = dict(cued)
        for thread in await self._store.threads_of(scope):
            if thread.stopped:
                counts[thread.handle] = followups.MAX_CUES
            elif thread.pushed_at is not None and thread.due_on <= today:
                counts[thread.handle] = counts.get(thread.handle, 0) + 1
        return followups.cue(found, today, self._tz, counts)

    async def waiting(self, scope: Scope, memories: Sequence[Memory], now: datetime) -> set[int]:
        """Which of the scope's active ``memories`` (all of them: at most ``MAX_OPEN`` threads are open) are
        open threads now, what ``/memories`` marks 待问候: a yearly date today, or an ended event not talked
        about since; not stopped, not answered. A group's memories are never followed up."""
        if scope.chat_id is not None:
            return set()
        today = now.astimezone(self._tz).date()
        found = {m.id for m in [*followups.days_of(memories, today),
                                *followups.open_threads(memories, today, self._tz)]}
        if not found:
            return set()
        done = {t.handle for t in await self._store.threads_of(scope) if t.stopped or t.answered}
        return found - done

    async def sent(self, scope: Scope, handle: int, at: datetime) -> bool:
        """Record a message written first about ``handle`` before it is sent (at most once: a crash after
        this never sends it again), and the scope's newest one written first. False when the thread is gone
        (forgotten meanwhile)."""
        return await self._store.mark_thread(scope, handle, pushed_at=at)

    async def state(self, scope: Scope) -> FollowUpScope:
        """Whether the user turned follow-ups off, when the last two were written first, when they last spoke."""
        return await self._store.followup_scope(scope)

    async def switch(self, scope: Scope, on: bool) -> None:
        """The user's ``/followup on|off``."""
        await self._store.set_followups_off(scope, not on)

    async def answered(self, scope: Scope, handle: int, now: datetime) -> bool:
        """The user answered what was written first about ``handle``: the follow-up counts as answered, and an
        event that is over is done (archived as ``DONE``: no longer recalled, restorable, its kanban card
        completed). Returns whether it was archived."""
        await self._store.mark_thread(scope, handle, answered=True)
        found = await self._store.fetch_by_ids(scope, [handle])
        if not found or not followups.done_when_answered(found[0], now.astimezone(self._tz).date()):
            return False
        await self._writer.write(scope, replace(found[0], status=Status.ARCHIVED, status_reason=StatusReason.DONE,
                                                updated_at=now))
        return True

    async def stop(self, scope: Scope, handle: int, now: datetime) -> bool:
        """"别再提": the memory is never followed up again, in conversation or written first. False when the
        memory has no date to follow up."""
        await self.catch_up(now)
        return await self._store.mark_thread(scope, handle, stopped=True)

    async def counts(self) -> dict[str, int]:
        return await self._store.thread_counts()
