"""The ``FollowUpState`` methods of ``InMemoryStore``, in dicts: the contract of ``storage/sqlite/followups.py``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import date, datetime

from companion.core.changes import ChangeOp
from companion.core.models import Scope
from companion.storage.records import ENDS_THREAD, FollowUpScope, Thread


class InMemoryThreads:
    def __init__(self) -> None:
        self._threads: dict[tuple[Scope, int], Thread] = {}
        self._followup_scopes: dict[Scope, FollowUpScope] = {}
        self._said: dict[Scope, datetime] = {}  # when the user last said something (``TurnRecord.said_at``)

    def _active(self, scope: Scope) -> bool:
        raise NotImplementedError  # the store's companion mode

    def _writable(self, scope: Scope, day_start: datetime) -> bool:
        """``due_threads``' rule for the scope, as the SQL stores apply it."""
        gate = self._followup_scopes.get(scope, FollowUpScope())
        said = self._said.get(scope)
        return (scope.chat_id is None and self._active(scope) and not gate.off
                and all(at < day_start for at in gate.sent[-1:]) and (said is None or said < day_start)
                and (len(gate.sent) < 2 or (said is not None and said > gate.sent[0])))

    def _end_threads(self, scope: Scope, entries: Iterable[tuple[int | None, ChangeOp]]) -> None:
        """A tombstone's thread goes with it (the journal entry's moment, as the SQL stores do)."""
        for handle, op in entries:
            if handle is not None and op in ENDS_THREAD:
                self._threads.pop((scope, handle), None)

    async def put_threads(self, scope: Scope, dates: Mapping[int, tuple[date, date] | None]) -> None:
        for handle, days in dates.items():
            old = self._threads.get((scope, handle))
            if days is None:
                if old is not None:
                    self._threads[(scope, handle)] = replace(old, closed=True)
            elif old is None:
                self._threads[(scope, handle)] = Thread(scope, handle, days[0], days[1])
            else:
                same = old.due_on == days[0]
                self._threads[(scope, handle)] = replace(
                    old, due_on=days[0], until_on=days[1], closed=False,
                    pushed_at=old.pushed_at if same else None, answered=old.answered and same)

    async def threads_of(self, scope: Scope) -> list[Thread]:
        return sorted((t for (s, _), t in self._threads.items() if s == scope), key=lambda t: t.handle)

    async def due_threads(self, today: date, day_start: datetime, limit: int) -> list[Thread]:
        due = [t for t in self._threads.values() if t.pushed_at is None and not t.stopped and not t.closed
               and t.due_on <= today <= t.until_on and self._writable(t.scope, day_start)]
        return sorted(due, key=lambda t: (t.due_on, t.scope.key, t.handle))[: max(limit, 0)]

    async def stale_threads(self, before: date, limit: int) -> list[Thread]:
        stale = [t for t in self._threads.values() if not t.closed and t.until_on < before]
        return sorted(stale, key=lambda t: (t.until_on, t.scope.key, t.handle))[: max(limit, 0)]

    async def mark_thread(self, scope: Scope, handle: int, *, pushed_at: datetime | None = None,
                          answered: bool | None = None, stopped: bool | None = None) -> bool:
        old = self._threads.get((scope, handle))
        if old is None:
            return False
        self._threads[(scope, handle)] = replace(
            old, pushed_at=old.pushed_at if pushed_at is None else pushed_at,
            answered=old.answered if answered is None else answered,
            stopped=old.stopped if stopped is None else stopped)
        if pushed_at is not None:
            gate = self._followup_scopes.get(scope, FollowUpScope())
            self._followup_scopes[scope] = replace(gate, sent=(*gate.sent[-1:], pushed_at))
        return True

    async def followup_scope(self, scope: Scope) -> FollowUpScope:
        return replace(self._followup_scopes.get(scope, FollowUpScope()), said_at=self._said.get(scope))

    async def set_followups_off(self, scope: Scope, off: bool) -> None:
        self._followup_scopes[scope] = replace(self._followup_scopes.get(scope, FollowUpScope()), off=off)

    async def thread_counts(self) -> dict[str, int]:
        found = list(self._threads.values())
        return {"sent": sum(t.pushed_at is not None for t in found), "answered": sum(t.answered for t in found),
                "stopped": sum(t.stopped for t in found)}
