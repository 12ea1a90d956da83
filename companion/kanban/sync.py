"""One linked user's sync with their kanban: setting the project up, and each round (pull, then push).

Pull comes first, so a field the user changed in Dida365 reaches the memory before the bot's own version of
the card is sent: when both sides changed the same field, the user's action wins (``pull``). Push is
state-based: for each memory the change journal names (``Outbox``: the store's ``changes_since``), the card
is made to match the memory as it is now (created, updated, completed when archived, deleted when forgotten
or replaced), so a change sent twice does no harm and an outage of any length loses nothing: the journal
cursor moves only past changes that reached the kanban. Nothing here holds a database transaction across a
request, and no chat reply waits on it (``worker`` runs it in the background).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo

from companion.core.changes import SCOPE_WIDE
from companion.core.errors import (
    DidaAuthError,
    DidaError,
    DidaLinkError,
    DidaRateLimitedError,
    DidaUnavailableError,
)
from companion.core.models import Memory, Scope, Status
from companion.engine.ports import KanbanPort
from companion.kanban import cards
from companion.kanban.card_records import CardState, Link, LinkState, TokenBox
from companion.kanban.dida_api import DidaClient, ProjectData
from companion.kanban.pull import ABSENT_TIME, Puller, memory_of
from memory import MemoryEngine

log = logging.getLogger(__name__)

RATE_PAUSE = timedelta(seconds=60)  # Dida365's advice after exceed_query_limit
MAX_BACKOFF = timedelta(minutes=30)
EXPIRY_WARNING = timedelta(days=7)
FULL_COMPARE = timedelta(days=1)
JOURNAL_PAGE = 200

Forget = Callable[[Scope, Iterable[int]], Awaitable[int]]


class Entry(Protocol):
    """One journal entry: which memory changed (None: the scope as a whole), how, and its place in order."""

    @property
    def seq(self) -> int: ...
    @property
    def handle(self) -> int | None: ...
    @property
    def op(self) -> str: ...


class Outbox(Protocol):
    """The store's change journal, read as the kanban's outbox."""

    async def change_counter(self, scope: Scope) -> int: ...
    async def changes_since(self, scope: Scope, after: int, limit: int) -> Sequence[Entry]: ...


@dataclass(frozen=True, slots=True)
class DidaConfig:
    client_id: str
    client_secret: str
    redirect_uri: str
    tz: ZoneInfo
    reminder_hour: int = 9
    tier_tags: bool = True
    # A card missing this long (and on two polls) was deleted: the poll interval, so a /dida_sync right after
    # a poll is no second look.
    absent_after: timedelta = ABSENT_TIME


class Notice(Protocol):
    async def __call__(self, user_id: int, text: str) -> None: ...


@dataclass(slots=True)
class Round:
    """What one round did, for ``/dida_sync`` and the tests."""

    pulled: int = 0
    pushed: int = 0
    skipped: str = ""  # why nothing was done (paused, broken, waiting out the rate limit)
    notices: list[str] = field(default_factory=list)


class KanbanSync:
    def __init__(self, client: DidaClient, state: KanbanPort, engine: MemoryEngine, outbox: Outbox | None,
                 tokens: TokenBox, config: DidaConfig, forget: Forget) -> None:
        self.client = client
        self._state = state
        self._engine = engine
        self._outbox = outbox
        self._tokens = tokens
        self._config = config
        self._puller = Puller(client, state, engine, forget, absent_after=config.absent_after)
        self._locks: dict[int, asyncio.Lock] = {}

    # ---- the link ----

    async def link(self, user_id: int, code: str, now: datetime) -> Round:
        """Exchange the code, set the project up (adopting one of the same name) and push every memory."""
        if not self._tokens.ready:
            raise DidaLinkError("DIDA_TOKEN_KEY is not set")
        grant = await self.client.exchange_code(code, self._config.client_id, self._config.client_secret,
                                                 self._config.redirect_uri)
        old = await self.load(user_id)
        link = Link(user_id, self._tokens.seal(grant.access_token), now, now + timedelta(seconds=grant.expires_in),
                    completed_since=now)
        if old is not None and old.project_id:
            link.project_id, link.columns = old.project_id, old.columns
        # The card map stays: relinked to the same project (the same account), every card is compared again,
        # so one whose memory was forgotten while the link was broken is deleted now; in another project
        # (another account) ``_setup`` drops it.
        await self._setup(link, grant.access_token)
        link.cursor = await self._counter(user_id)
        await self._save(link)
        return await self.sync(user_id, now, full=True)

    async def unlink(self, user_id: int, delete_project: bool) -> None:
        link = await self.load(user_id)
        if link is None:
            return
        if delete_project:
            await self._delete_cards(link)
        await self._state.put_dida_link(user_id, None)

    async def load(self, user_id: int) -> Link | None:
        text = await self._state.dida_link(user_id)
        return None if text is None else Link.decode(text)

    async def card_count(self, user_id: int) -> int:
        return sum(1 for c in (await self._state.dida_cards(user_id)).values() if CardState.decode(c).task_id)

    async def pending(self, user_id: int) -> int:
        """Journal entries not yet on the kanban."""
        link = await self.load(user_id)
        if link is None or self._outbox is None:
            return 0
        return len(await self._outbox.changes_since(Scope(user_id), link.cursor, 10_000))

    async def _setup(self, link: Link, token: str) -> None:
        """The project and its three columns: adopt what exists by id or name, create what is missing."""
        before = link.project_id
        data = await self.client.project_data(token, link.project_id) if link.project_id else None
        if data is None or not data.found or data.closed:
            found = [p for p in await self.client.projects(token)
                     if p.get("name") == cards.PROJECT_NAME and not p.get("closed")]
            link.project_id = str(found[0]["id"]) if found else str(
                (await self.client.create_project(token, cards.PROJECT_NAME))["id"])
        columns = {str(c.get("name")): str(c["id"]) for c in await self.client.columns(token, link.project_id)
                   if c.get("id")}
        for tier, name in cards.COLUMN_NAMES.items():
            if name not in columns:
                columns[name] = str((await self.client.create_column(token, link.project_id, name))["id"])
            link.columns[tier.value] = columns[name]
        link.state, link.told, link.missing_since = LinkState.OK, "", {}
        rows = {h: CardState.decode(t) for h, t in (await self._state.dida_cards(link.user_id)).items()}
        if link.project_id != before:  # a new project: every card is made again there
            await self._state.put_dida_cards(link.user_id, dict.fromkeys(rows))
        else:  # the same project: every card is sent again, into the columns as they are now
            await self._state.put_dida_cards(link.user_id, {h: CardState(c.task_id, "", {}).encode()
                                                            for h, c in rows.items()})

    # ---- a round ----

    async def sync(self, user_id: int, now: datetime, *, full: bool = False, rebuild: bool = False,
                   confirm: bool = False) -> Round:
        """Pull, then push; errors end the round, are kept in the link and set when it is tried again. One
        round per user at a time (the background loop and ``/dida_sync`` may ask together). ``confirm``: the
        user says the cards held after a bulk disappearance were deleted on purpose (``pull.BULK_SHARE``)."""
        async with self._locks.setdefault(user_id, asyncio.Lock()):
            return await self._round(user_id, now, full=full, rebuild=rebuild, confirm=confirm)

    async def _round(self, user_id: int, now: datetime, *, full: bool, rebuild: bool, confirm: bool = False) -> Round:
        done = Round()
        link = await self.load(user_id)
        if link is not None and confirm and link.held:
            link.confirmed = True
        if link is None:
            done.skipped = "unlinked"
            return done
        if link.state is LinkState.BROKEN:
            done.skipped = "broken"
            return done
        if link.state is LinkState.PAUSED and not rebuild:
            done.skipped = "paused"
            return done
        if link.rate_until is not None and now < link.rate_until:
            done.skipped = "rate limited"
            return done
        try:
            token = self._tokens.open(link.token)
            if rebuild:
                await self._setup(link, token)
                full = True
            if now >= link.expires_at - EXPIRY_WARNING and not link.warned_expiry:
                link.warned_expiry = True
                done.notices.append("expiry")
            data = await self.client.project_data(token, link.project_id)
            gone = self._gone(link, data)
            if gone:
                link.state = LinkState.PAUSED
                link.last_error = gone
                if link.told != gone:
                    link.told = gone
                    done.notices.append(gone)
                return done
            held = list(link.held)
            done.pulled = await self._puller.pull(link, token, data, now)
            if link.held and link.held != held:
                done.notices.append("bulk")
            if self._puller.waiting and link.told != "full":
                link.told = "full"
                done.notices.append("full")
            elif not self._puller.waiting and link.told == "full":
                link.told = ""  # room again: a later overflow is told again
            done.pushed = await self._push(link, token, data, now, full=full)
            link.last_sync, link.last_error, link.failures, link.retry_at, link.rate_until = now, "", 0, None, None
            if link.columns_ignored and link.told != "columns":
                link.told = "columns"
                done.notices.append("columns")
        except DidaAuthError as exc:
            link.state, link.last_error = LinkState.BROKEN, str(exc)
            if link.told != "broken":
                link.told = "broken"
                done.notices.append("broken")
        except DidaRateLimitedError as exc:
            link.rate_until, link.last_error = now + RATE_PAUSE, str(exc)
            done.skipped = "rate limited"
        except (DidaUnavailableError, DidaError) as exc:
            link.failures += 1
            link.retry_at = now + min(MAX_BACKOFF, timedelta(seconds=30 * 2 ** min(link.failures, 8)))
            link.last_error = str(exc)
            log.info("dida sync of user %s failed (%s); retrying at %s", user_id, type(exc).__name__, link.retry_at)
        finally:
            fresh = await self.load(user_id)
            if fresh is not None and fresh.linked_at == link.linked_at:  # not unlinked or relinked meanwhile
                await self._save(link)
        return done

    def _gone(self, link: Link, data: ProjectData) -> str:
        """'project' when the project is deleted or closed, 'column' when a tier's column is gone, else ''."""
        if not data.found or data.closed:
            return "project"
        have = {str(c.get("id")) for c in data.columns}
        return "column" if data.columns and any(cid not in have for cid in link.columns.values()) else ""

    # ---- push ----

    async def _push(self, link: Link, token: str, data: ProjectData, now: datetime, *, full: bool) -> int:
        scope = Scope(link.user_id)
        # Once a day every memory is compared with its card as well (locally; only differences are sent):
        # whatever the journal no longer holds (pruned while the bot was stopped for weeks) still arrives.
        if link.compared is None or now - link.compared >= FULL_COMPARE:
            full, link.compared = True, now
        handles, last = await self._changed(link, full)
        states = {h: CardState.decode(t) for h, t in (await self._state.dida_cards(link.user_id)).items()}
        pushed = 0
        for handle in handles:
            pushed += await self._reconcile(link, token, scope, handle, states, data)
        link.cursor = max(link.cursor, last)
        return pushed

    async def _changed(self, link: Link, full: bool) -> tuple[list[int], int]:
        """The handles to bring up to date, in journal order, and the journal seq they reach."""
        scope = Scope(link.user_id)
        handles: dict[int, None] = {}
        last = link.cursor
        if self._outbox is not None and not full:
            while True:
                page = await self._outbox.changes_since(scope, last, JOURNAL_PAGE)
                for entry in page:
                    if entry.handle is not None:
                        handles[entry.handle] = None
                    elif entry.op in SCOPE_WIDE:  # decay or a chat move: every card may differ
                        full = True
                    last = max(last, entry.seq)
                if len(page) < JOURNAL_PAGE:
                    break
        elif self._outbox is not None:
            last = await self._outbox.change_counter(scope)
        if full or self._outbox is None:
            everything = await self._engine.memories(scope)
            handles.update((m.id, None) for m in everything)
            handles.update((h, None) for h in await self._state.dida_cards(link.user_id))
        return list(handles), last

    async def _reconcile(self, link: Link, token: str, scope: Scope, handle: int, states: dict[int, CardState],
                         data: ProjectData) -> int:
        memory = await memory_of(self._engine, scope, handle)
        state = states.get(handle)
        if state is not None and state.creating:
            state = await self._adopt(link, token, handle, state, data)
        if memory is not None and memory.status is Status.ACTIVE:
            card = cards.card_of(memory, self._config.tz)
            if state is not None and state.task_id and state.synced == card.fields():
                return 0
            states[handle] = await self._put(link, token, memory, card, state)
            await self._state.put_dida_cards(link.user_id, {handle: states[handle].encode()})
            return 1
        if state is None:
            return 0
        if state.task_id:
            if memory is not None and memory.status is Status.ARCHIVED:
                await self.client.complete_task(token, link.project_id, state.task_id)
            else:  # forgotten, replaced or gone: privacy reaches the kanban too
                await self.client.delete_task(token, link.project_id, state.task_id)
        states.pop(handle, None)
        await self._state.put_dida_cards(link.user_id, {handle: None})
        return 1

    async def _adopt(self, link: Link, token: str, handle: int, state: CardState, data: ProjectData) -> CardState:
        """A create whose answer was lost may have made the card: find it by its marker (in this round's read
        of the project, made after the lost answer) before sending again."""
        for task in data.tasks:
            if cards.handle_in(str(task.get("content") or "")) == handle:
                return CardState(str(task["id"]), str(task.get("etag") or ""), {}, False)
        return CardState(creating=True)

    async def _put(self, link: Link, token: str, memory: Memory, card: cards.Card,
                   state: CardState | None) -> CardState:
        column = link.column(memory.tier)
        if state is not None and state.task_id:
            body = cards.task_body(memory.keywords, card, link.project_id, column, self._config.tz,
                                   hour=self._config.reminder_hour, tier_tags=self._config.tier_tags,
                                   task_id=state.task_id)
            answer = await self.client.update_task(token, body)
            etag = str(answer.get("etag") or "") if answer else state.etag
            return CardState(state.task_id, etag, card.fields())
        body = cards.task_body(memory.keywords, card, link.project_id, column, self._config.tz,
                               hour=self._config.reminder_hour, tier_tags=self._config.tier_tags)
        await self._state.put_dida_cards(link.user_id, {memory.id: CardState(creating=True).encode()})
        created = await self.client.create_task(token, body)
        placed = created.get("columnId")
        if placed and placed != column:
            link.columns_ignored = True  # the tier tag carries the tier; the user is told once
        return CardState(str(created["id"]), str(created.get("etag") or ""), card.fields())

    async def _delete_cards(self, link: Link) -> None:
        """Unlinking with "delete": every card goes, then the rows (the project itself stays an empty shell:
        the Open API deletes projects too, but a user's own cards in it are theirs)."""
        try:
            token = self._tokens.open(link.token)
            for text in (await self._state.dida_cards(link.user_id)).values():
                state = CardState.decode(text)
                if state.task_id:
                    await self.client.delete_task(token, link.project_id, state.task_id)
        except DidaError as exc:
            log.info("dida unlink of user %s could not delete every card (%s)", link.user_id, type(exc).__name__)

    async def _counter(self, user_id: int) -> int:
        return 0 if self._outbox is None else await self._outbox.change_counter(Scope(user_id))

    async def _save(self, link: Link) -> None:
        await self._state.put_dida_link(link.user_id, link.encode())

