"""The user's actions on their kanban, read back and applied through the engine's own calls (the ones the
Telegram buttons use), so validity, review dates, receipts and the weekly summary follow.

Each card is compared field by field with its last synced snapshot (``CardState.synced``): a card whose
``etag`` did not move is skipped, and a field equal to what the bot last sent is the bot's own echo, never
applied again. A card moved to another tier's column moves the memory; a completed card archives it; a new
title or "内容" line rewords it (keywords re-derived); a new priority sets its importance; a card gone from
the project and not completed, on two polls a poll interval apart, forgets it (with its tombstone: a deleted
card is never read as a slow answer), unless many went at once (``BULK_SHARE``: then the user confirms); a card
the user adds in one of the three columns becomes a memory (origin ``dida``) in that tier. A missing project or
column is decided before this runs (``sync``): never read an empty answer as "every card was deleted".
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import date, datetime, timedelta, tzinfo
from typing import Any, Literal

from companion.core import dates, tiers
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, When
from companion.core.timeutil import from_db, to_db
from companion.engine.ports import KanbanPort
from companion.kanban import cards
from companion.kanban.card_records import CardState, Link
from companion.kanban.dida_api import DidaClient, ProjectData
from memory import MemoryEngine

# A card missing from a poll and still missing a poll interval later was deleted (the default interval; a
# list read twice in a second proves little).
ABSENT_TIME = timedelta(minutes=10)
# More than this share of the linked cards (and at least BULK_MIN) gone in one poll is no user's deletes but an
# emptied list, a sync gone wrong or a slip: their memories are kept until the user confirms.
BULK_SHARE = 0.25
BULK_MIN = 3
COMPLETED_OVERLAP = timedelta(minutes=5)  # the completed window reaches back past the last poll

Forget = Callable[[Scope, Iterable[int]], Awaitable[int]]

log = logging.getLogger(__name__)


def dida_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S%z")


class Puller:
    def __init__(self, client: DidaClient, state: KanbanPort, engine: MemoryEngine, forget: Forget, *,
                 absent_after: timedelta = ABSENT_TIME) -> None:
        self._absent_after = absent_after
        self._client = client
        self._state = state
        self._engine = engine
        self._forget = forget
        self.waiting = 0  # new cards the last pull left on the board: the scope had no room (``MEMORY_CAPACITY``)

    async def pull(self, link: Link, token: str, data: ProjectData, now: datetime) -> int:
        """Apply what the user did since the last poll; returns how many memories it changed."""
        scope = Scope(link.user_id)
        states = {h: CardState.decode(t) for h, t in (await self._state.dida_cards(link.user_id)).items()}
        by_task = {str(t.get("id")): t for t in data.tasks}
        since = (link.completed_since or link.linked_at) - COMPLETED_OVERLAP
        completed = {str(t.get("id")) for t in await self._client.completed_tasks(
            token, [link.project_id], dida_time(since), dida_time(now + timedelta(minutes=1)))}
        changed = 0
        rows: dict[int, str | None] = {}
        known = {s.task_id for s in states.values() if s.task_id}
        gone = {task_id for task_id in known if task_id not in by_task and task_id not in completed}
        bulk = self._bulk(link, gone, len(known))
        for handle, state in states.items():
            if not state.task_id:
                continue
            task = by_task.get(state.task_id)
            if task is None and bulk == "held" and state.task_id in gone:
                continue
            if task is None and bulk == "confirmed" and state.task_id in gone:
                changed += await self._deleted(link, scope, handle, state, rows)
                continue
            if task is None:
                changed += await self._absent(link, scope, handle, state, state.task_id in completed, now, rows)
                continue
            link.missing_since.pop(state.task_id, None)
            if str(task.get("etag") or "") == state.etag and state.synced:
                continue
            changed += await self._edited(link, scope, handle, state, task, now)
            rows[handle] = state.encode()
        fresh = [task for task_id, task in by_task.items() if task_id not in known and task_id not in link.ignored]
        # Cards count toward the scope's capacity like any memory, but never push one out: past it a new card
        # stays on the board, unread, until archiving or forgetting makes room.
        room = self._engine.config.capacity - len(await self._engine.memories(scope)) if fresh else 0
        self.waiting = 0
        for task in fresh:
            if room <= 0 and cards.handle_in(str(task.get("content") or "")) is None:
                self.waiting += 1
                continue
            added = await self._new(link, scope, task, states, rows, now)
            changed += added
            room -= added
        await self._state.put_dida_cards(link.user_id, rows)
        link.completed_since = now  # only once every completion read was applied
        return changed

    async def _absent(self, link: Link, scope: Scope, handle: int, state: CardState, completed: bool,
                      now: datetime, rows: dict[int, str | None]) -> int:
        if completed:
            rows[handle] = None
            memory = await self._get(scope, handle)
            if memory is not None and memory.status is Status.ACTIVE:
                await self._engine.archive(scope, handle, now)
                return 1
            return 0
        # Stamped on the first poll that missed it, so a second poll, a poll interval later, decides.
        since = link.missing_since.setdefault(state.task_id, to_db(now))
        if now - from_db(since) < self._absent_after:
            return 0
        return await self._deleted(link, scope, handle, state, rows)

    async def _deleted(self, link: Link, scope: Scope, handle: int, state: CardState,
                       rows: dict[int, str | None]) -> int:
        link.missing_since.pop(state.task_id, None)
        rows[handle] = None
        return await self._forget(scope, [handle])

    @staticmethod
    def _bulk(link: Link, gone: set[str], linked: int) -> Literal["held", "confirmed", ""]:
        """What this poll does with the memories of the cards ``gone``: "held" when too many of the ``linked``
        went at once and the user has not confirmed (their memories stay, and the user is asked);
        "confirmed" when the user confirmed the cards held (forgotten now); "" otherwise (each card's absence
        is weighed on its own). A confirmation covers the cards held when it was given, no others."""
        if not (len(gone) >= BULK_MIN and len(gone) > BULK_SHARE * linked):
            link.held, link.confirmed = [], False
            return ""
        if link.confirmed and gone <= set(link.held):
            link.held, link.confirmed = [], False
            return "confirmed"
        if sorted(gone) != link.held:
            log.warning("kanban of user %d: %d of %d cards gone at once; their memories are kept until the "
                        "user confirms", link.user_id, len(gone), linked)
        link.held, link.confirmed = sorted(gone), False
        return "held"

    async def _edited(self, link: Link, scope: Scope, handle: int, state: CardState, task: dict[str, Any],
                      now: datetime) -> int:
        """Merge one card's fields against the snapshot; the user's change wins a field both sides changed."""
        synced = state.synced
        state.etag = str(task.get("etag") or "")
        title, content = str(task.get("title") or ""), str(task.get("content") or "")
        column = str(task.get("columnId") or "")
        # Where the app keeps no column (or ignored the asked one), the tier tag says the tier.
        tier = cards.tier_of_tags(task.get("tags")) if link.columns_ignored or not column else link.tier_of_column(
            column)
        priority = int(task.get("priority") or 0)
        state.synced = {**synced, "title": title, "content": content, "priority": priority,
                        "tier": (tier.value if tier is not None else synced.get("tier"))}
        memory = await self._get(scope, handle)
        if memory is None or memory.status is not Status.ACTIVE or not synced:
            return 0
        text: str | None = None
        line = cards.content_line(content)
        if line and line != cards.content_line(str(synced.get("content") or "")):
            text = line
        elif title and title != synced.get("title"):
            text = title
        importance = (cards.IMPORTANCE_OF_PRIORITY.get(priority) if priority != synced.get("priority") else None)
        touched = 0
        if (text is not None and text != memory.event) or importance is not None:
            await self._engine.edit(scope, handle, text if text != memory.event else None, now,
                                    importance=importance)
            touched = 1
        if tier is not None and tier.value != synced.get("tier") and tier is not memory.tier:
            await self._engine.move(scope, handle, tier, now)
            touched = 1
        return touched

    async def _new(self, link: Link, scope: Scope, task: dict[str, Any], states: dict[int, CardState],
                   rows: dict[int, str | None], now: datetime) -> int:
        task_id, content = str(task.get("id")), str(task.get("content") or "")
        marked = cards.handle_in(content)
        if marked is not None:
            # The bot's own card whose create answer was lost, or one of an earlier link: adopt it (owner-checked).
            memory = await self._get(scope, marked)
            state = states.get(marked)
            if memory is not None and memory.is_active and (state is None or state.creating or not state.task_id):
                states[marked] = CardState(task_id, str(task.get("etag") or ""), {})
                rows[marked] = states[marked].encode()
            return 0
        tier = link.tier_of_column(str(task.get("columnId") or "")) or cards.tier_of_tags(task.get("tags"))
        title = str(task.get("title") or "").strip() or (cards.content_line(content) or content).strip()
        if tier is None or not title:
            return 0
        # The card's due day is when it happens; else a day its words name (read in the bot's timezone).
        tz = self._engine.config.tz
        words = dates.resolve(title, now.astimezone(tz).date())
        due = _due_day(task.get("dueDate"), tz)
        draft = MemoryDraft(event=words.text, keywords=[], importance=cards.IMPORTANCE_OF_PRIORITY.get(
            int(task.get("priority") or 0), 35.0), validity=tiers.VALIDITY_OF[tier], type=MemoryType.FACT,
            origin=Origin.DIDA, tier=tier, source_at=now, happens=When(due) if due else words.when)
        saved = await self._engine.save(scope, draft, now)
        handle = saved.memory.id
        if handle in states and states[handle].task_id:
            # The same fact as a memory already on the board: the user's copy stays theirs, unlinked.
            link.ignored.append(task_id)
            return 1
        states[handle] = CardState(task_id, "", {})
        rows[handle] = states[handle].encode()
        return 1

    async def _get(self, scope: Scope, handle: int) -> Memory | None:
        return await memory_of(self._engine, scope, handle)


def _due_day(value: object, tz: tzinfo) -> date | None:
    """A Dida365 due date ("2026-12-09T00:00:00+0800") as the local day; anything else is no day."""
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%S%z").astimezone(tz).date()
    except ValueError:
        return None


async def memory_of(engine: MemoryEngine, scope: Scope, handle: int) -> Memory | None:
    """The scope's memory (a tombstone included), or None when it is gone or not the scope's."""
    try:
        return await engine.get(scope, handle)
    except (MemoryNotFoundError, NotYourMemoryError):
        return None

