"""The kanban as the Telegram commands and ``bot.py`` see it: linking (the authorize link, ``/dida_code``
and the callback), status, a sync now, unlinking, telling the user what they must know once, and the
background loop (``KanbanWorker``) that pushes after each change and polls every ``DIDA_POLL_MINUTES``."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from companion.core.errors import DidaAuthError, DidaError, DidaLinkError
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from companion.engine.ports import KanbanPort
from companion.kanban import card_texts as texts
from companion.kanban.card_records import Link, LinkState
from companion.kanban.dida_api import authorize_url
from companion.kanban.oauth import OAuthStates
from companion.kanban.sync import KanbanSync, Outbox, Round

log = logging.getLogger(__name__)

Notify = Callable[[int, str], Awaitable[None]]
SYNC_ANSWER_SECONDS = 3.0  # /dida_sync answers with the result within this, else goes on in the background


@dataclass(frozen=True, slots=True)
class LinkConfig:
    auth_base: str
    client_id: str
    redirect_uri: str
    callback: bool  # the bot runs the redirect URI's server itself
    tz: ZoneInfo


class KanbanService:
    def __init__(self, sync: KanbanSync, config: LinkConfig, *, clock: Callable[[], datetime] = utcnow,
                 tokens_ready: bool = True) -> None:
        self.sync = sync
        self.states = OAuthStates()
        self._config = config
        self._clock = clock
        self._tokens_ready = tokens_ready
        self.notify: Notify | None = None  # set once the Telegram client exists
        self._running: set[asyncio.Task[Any]] = set()  # syncs answered later, and their answers

    def link_text(self, user_id: int) -> str:
        if not self._tokens_ready:
            return texts.NO_KEY
        state = self.states.issue(user_id, self._clock())
        url = authorize_url(self._config.auth_base, self._config.client_id, self._config.redirect_uri, state)
        return texts.LINK.format(url=url, after=texts.AFTER_CALLBACK if self._config.callback else texts.AFTER_CODE)

    async def code(self, user_id: int, code: str) -> str:
        if not self._tokens_ready:
            return texts.NO_KEY
        if not code.strip():
            return texts.CODE_USAGE
        if not self.states.take_user(user_id, self._clock()):
            return texts.CODE_NO_STATE
        return await self._link(user_id, code.strip())

    async def finish_callback(self, state: str, code: str) -> str:
        """The callback's page text; the user hears the outcome in Telegram too."""
        user_id = self.states.take(state, self._clock()) if state and code else None
        if user_id is None:
            return texts.CALLBACK_BAD
        said = await self._link(user_id, code)
        await self._tell(user_id, said)
        return texts.CALLBACK_OK if said.startswith(texts.LINKED[:6]) else texts.CALLBACK_FAILED

    async def _link(self, user_id: int, code: str) -> str:
        try:
            done = await self.sync.link(user_id, code, self._clock())
        except DidaLinkError:
            return texts.NO_KEY
        except DidaAuthError:
            return texts.CODE_REFUSED
        except DidaError as exc:
            log.info("dida: linking user %s failed (%s)", user_id, type(exc).__name__)
            return texts.CODE_REFUSED if exc.status == 400 else texts.LINK_FAILED
        await self._notices(user_id, done, skip={"columns"})
        text = texts.LINKED.format(cards=await self.sync.card_count(user_id))
        return text + ("\n" + texts.NOTICES["columns"] if "columns" in done.notices else "")

    async def status(self, user_id: int) -> str:
        link = await self.sync.load(user_id)
        if link is None:
            return texts.NOT_LINKED
        return texts.status(link.linked_at, await self.sync.card_count(user_id), link.last_sync,
                            await self.sync.pending(user_id), link.state.value, link.last_error, self._config.tz)

    async def sync_now(self, user_id: int, *, confirm: bool = False, wait: float = SYNC_ANSWER_SECONDS) -> str:
        """``/dida_sync``; ``confirm`` (``/dida_sync 删除``): the cards that vanished at once were deleted on
        purpose, so their memories go too. A round longer than ``wait`` seconds (hundreds of new cards, a slow
        service) goes on in the background and says its result when done: the user's next messages, which are
        answered in order after this command, never wait for it."""
        link = await self.sync.load(user_id)
        if link is None:
            return texts.NOT_LINKED
        if link.state is LinkState.BROKEN:
            return texts.SYNC_BROKEN
        task = asyncio.create_task(self._sync_round(user_id, link, confirm), name=f"dida-sync-{user_id}")
        finished, _ = await asyncio.wait({task}, timeout=wait)
        if task in finished:
            return task.result()
        self._running.add(task)
        task.add_done_callback(functools.partial(self._said_later, user_id))
        return texts.SYNC_LONG

    def _said_later(self, user_id: int, task: asyncio.Task[str]) -> None:
        self._running.discard(task)
        if task.cancelled():
            return
        if task.exception() is not None:  # a task's edge: logged once, the user told to try again
            log.error("dida: background sync of user %s failed", user_id, exc_info=task.exception())
            said = texts.SYNC_WAIT
        else:
            said = task.result()
        told = asyncio.create_task(self._tell(user_id, said), name=f"dida-said-{user_id}")
        self._running.add(told)
        told.add_done_callback(self._running.discard)

    async def _sync_round(self, user_id: int, link: Link, confirm: bool) -> str:
        done = await self.sync.sync(user_id, self._clock(), rebuild=link.state is LinkState.PAUSED, confirm=confirm)
        await self._notices(user_id, done)
        fresh = await self.sync.load(user_id)
        if fresh is not None and fresh.state is LinkState.PAUSED:
            return texts.SYNC_PAUSED
        if done.skipped or (fresh is not None and fresh.last_error):
            return texts.SYNC_WAIT
        return texts.SYNCED.format(pulled=done.pulled, pushed=done.pushed)

    async def unlink(self, user_id: int, choice: str) -> str:
        if await self.sync.load(user_id) is None:
            return texts.NOT_LINKED
        if choice not in ("keep", "delete"):
            return texts.UNLINK_ASK
        await self.sync.unlink(user_id, delete_project=choice == "delete")
        return texts.UNLINKED_DELETE if choice == "delete" else texts.UNLINKED_KEEP

    async def background(self, user_id: int) -> Round:
        done = await self.sync.sync(user_id, self._clock())
        await self._notices(user_id, done)
        return done

    async def _notices(self, user_id: int, done: Round, skip: frozenset[str] | set[str] = frozenset()) -> None:
        for notice in done.notices:
            if notice not in skip:
                await self._tell(user_id, texts.NOTICES[notice])

    async def _tell(self, user_id: int, text: str) -> None:
        if self.notify is not None:
            await self.notify(user_id, text)


class KanbanWorker:
    """Every ``tick`` seconds: each linked user whose journal moved, or whose poll is due, syncs; a user
    waiting out a rate limit or a backoff is left alone. A few users at a time; a reply never waits on it."""

    def __init__(self, service: KanbanService, state: KanbanPort, outbox: Outbox | None, poll: timedelta, *,
                 tick: float = 15.0, concurrency: int = 8, clock: Callable[[], datetime] = utcnow) -> None:
        self._service, self._state, self._outbox = service, state, outbox
        self._poll, self._tick, self._clock = poll, tick, clock
        self._gate = asyncio.Semaphore(concurrency)
        self._seen: dict[int, int] = {}  # user -> journal counter at their last round
        self._polled: dict[int, datetime] = {}

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # the edge of a background loop: log once, keep going
                log.exception("dida: a sync pass failed")
            await asyncio.sleep(self._tick)

    async def tick(self) -> int:
        """One pass; returns how many users synced."""
        now = self._clock()
        due = [u for u in await self._state.dida_users() if await self._due(u, now)]
        await asyncio.gather(*(self._one(u) for u in due))
        return len(due)

    async def _due(self, user_id: int, now: datetime) -> bool:
        link = await self._service.sync.load(user_id)
        if link is None or link.state is not LinkState.OK:
            return False
        if any(t is not None and now < t for t in (link.rate_until, link.retry_at)):
            return False
        last = self._polled.get(user_id)
        if last is None or now - last >= self._poll or link.retry_at is not None:
            return True
        counter = 0 if self._outbox is None else await self._outbox.change_counter(Scope(user_id))
        return counter != self._seen.get(user_id)

    async def _one(self, user_id: int) -> None:
        async with self._gate:
            counter = 0 if self._outbox is None else await self._outbox.change_counter(Scope(user_id))
            try:
                await self._service.background(user_id)
            except Exception:  # one user's failure never stops the others
                log.exception("dida: sync of user %s failed", user_id)
            self._seen[user_id] = counter
            self._polled[user_id] = self._clock()
