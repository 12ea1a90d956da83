"""What the conversation hands to long-term learning, and when: each turn is queued for extraction (a
turn the database cannot take waits in the session, and in this process's spool file on disk, and is
queued in order with the next one; a process that stopped or died meanwhile has its spool replayed by the
next), extraction runs every few turns or at once on news, and extraction and profile rebuilds run as
background tasks after the reply, so the user never waits for them (that rule is every host's:
``engine.cadence``, with the countdown kept in the ``Session``). ``ChatService`` owns one."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

from companion.chat.session import Session
from companion.core.errors import RefusedDataError, StorageError
from companion.core.models import Recalled, Scope, Turn
from companion.core.spools import SpooledTurns, TurnSpools
from companion.engine.cadence import Cadence
from memory import MemoryEngine, MemoryTurn

log = logging.getLogger(__name__)


class Learning:
    def __init__(
        self, engine: MemoryEngine, clock: Callable[[], datetime], rng: random.Random, *,
        extract_every: tuple[int, int], important_keywords: tuple[str, ...], spools: TurnSpools | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        # The countdown and the background extractions are every host's rule (``engine.cadence``).
        self._cadence = Cadence(engine, clock, rng, extract_every=extract_every, important_keywords=important_keywords)
        self._tasks: set[asyncio.Task[None]] = set()
        self._spools = spools
        self._spooled: set[Scope] = set()  # scopes with turns in this process's spool file

    def next_extraction(self) -> int:
        return self._cadence.next_extraction()

    async def finish_turn(
        self, memory: MemoryTurn, session: Session, turn: Turn | None, shown: Sequence[Recalled],
        answer: str | None, now: datetime, *, conversation: str | None = None,
    ) -> list[int]:
        """Record the turn in one write (``MemoryTurn.finish``): ``turn`` (None: nothing to keep)
        as short-term context and queued for learning, behind any turns still waiting, and the shown
        memories' accesses and mentions. A turn the database cannot take (a full disk) waits in the session
        and is queued, in order, with the next turn it can take; ``conversation``: the session's state to keep
(``Session.state``). Returns the mentioned memories' ids."""
        scope = memory.scope
        if turn is not None:
            if len(session.unqueued) == session.unqueued.maxlen:
                log.warning("a turn of %s waited too long to be queued for learning and is dropped", scope.key)
            session.unqueued.append(turn)

        async def write(short: Turn | None, queued: list[Turn]) -> list[int]:
            return await memory.finish(now, short=short, queued=queued, shown=shown, reply=answer,
                                       conversation=conversation)

        try:
            try:
                mentioned = await write(turn, list(session.unqueued))
            except RefusedDataError as exc:
                # One waiting turn the database cannot take must not hold back every turn after it: each is
                # queued on its own, those refused are set aside, and the turn is recorded without them.
                refused = await self.queue_apart(scope, session.unqueued, exc)
                mentioned = await write(None if turn is None or turn in refused else turn, [])
        except StorageError as exc:
            log.warning("could not record the turn of %s (%d wait to be queued for learning): %s", scope.key,
                        len(session.unqueued), exc)
            await self.mirror(scope, session)
            return []
        session.unqueued.clear()
        if scope in self._spooled:
            await self.mirror(scope, session)
        return mentioned

    async def queue_apart(self, scope: Scope, waiting: deque[Turn], refusal: RefusedDataError) -> list[Turn]:
        """Queue the ``waiting`` turns one by one, taking each from the front once done, after the database
        refused them together; those it refuses on their own are set aside (``TurnSpools.set_aside``: kept on
        disk for the operator, reached by forgetting, never tried again). Returns them. Another failure (the
        database went away meanwhile) raises, as any write does, with the turns not yet done still waiting."""
        refused: list[Turn] = []
        try:
            while waiting:
                try:
                    await self.engine.note_turn(scope, waiting[0])
                except RefusedDataError:
                    refused.append(waiting[0])
                waiting.popleft()
        finally:
            if refused:
                await self._set_aside(scope, refused, refusal)
        return refused

    async def _set_aside(self, scope: Scope, refused: list[Turn], refusal: RefusedDataError) -> None:
        kept = ""
        if self._spools is not None:
            try:
                await self._spools.set_aside(scope, refused)
                kept = " (kept in the spool's set-aside file)"
            except StorageError as exc:
                kept = f" (and could not be kept: {exc})"
        log.warning("%d turn(s) of %s the database refuses are set aside%s: %s", len(refused), scope.key, kept,
                    refusal)

    async def queue_waiting(self, scope: Scope, session: Session) -> None:
        while session.unqueued:
            try:
                await self.engine.note_turn(scope, session.unqueued[0])
            except StorageError as exc:
                log.warning("%d turn(s) of %s wait to be queued for learning: %s", len(session.unqueued), scope.key,
                            exc)
                break
            session.unqueued.popleft()
        await self.mirror(scope, session)

    def spooled(self) -> list[Scope]:
        """The scopes with turns in this process's spool file."""
        return list(self._spooled)

    async def mirror(self, scope: Scope, session: Session) -> None:
        """This process's spool holds exactly the session's waiting turns: after a failed write, a forget
        (which takes turns out of the session), and once they are queued (none left: the rows go)."""
        if self._spools is None or (not session.unqueued and scope not in self._spooled):
            return
        try:
            await self._spools.own().keep(scope, list(session.unqueued))
        except StorageError as exc:  # the spool's disk is full too: the turns wait in memory only
            log.warning("%d turn(s) of %s wait in this process only: %s", len(session.unqueued), scope.key, exc)
            return
        if session.unqueued:
            self._spooled.add(scope)
        else:
            self._spooled.discard(scope)

    async def scrub_spools(self, scope: Scope, keep: Callable[[Turn], bool]) -> None:
        """A forget reaches the scope's turns in every spool file (``SpoolsFollow``, before this process's is
        mirrored from its session)."""
        if self._spools is None:
            return
        try:
            await self._spools.scrub(scope, keep)
        except StorageError as exc:
            log.warning("a spool file could not be scrubbed for %s: %s", scope.key, exc)

    async def forgotten(self, scope: Scope, session: Session | None, *, unexplained: bool) -> None:
        """After a forget reached the session (``SessionsFollow``): this process's spool holds what the session
        still waits with. ``unexplained``: the forget is known by handle only (another process's), so without
        a session the scope's turns in this process's file go too, none of them proven clean."""
        if session is not None:
            await self.mirror(scope, session)
        elif unexplained and self._spools is not None and scope in self._spooled:
            try:
                await self._spools.own().keep(scope, [])
            except StorageError as exc:
                log.warning("a spool file could not be scrubbed for %s: %s", scope.key, exc)
                return
            self._spooled.discard(scope)

    async def replay_spools(self) -> int:
        """Queue for learning the turns that processes gone (stopped during an outage, or crashed) left in
        their spool files, each scope's in one write and in order; a scope the database still cannot take
        stays spooled for the next replay. Returns how many turns were queued."""
        if self._spools is None:
            return 0
        queued = 0
        with self._spools.orphans() as orphans:
            for spool in orphans:
                try:
                    scopes = await spool.scopes()
                except StorageError as exc:
                    log.warning("a spool file waits for the next replay: %s", exc)
                    continue
                emptied = True
                for scope in scopes:  # a scope that cannot be queued now does not hold back the others
                    try:
                        queued += await self._replay(spool, scope)
                    except StorageError as exc:
                        log.warning("spooled turns of %s wait for the next replay: %s", scope.key, exc)
                        emptied = False
                if emptied:
                    self._spools.remove(spool)
        if queued:
            log.info("%d spooled turn(s) queued for learning", queued)
        return queued

    async def _replay(self, spool: SpooledTurns, scope: Scope) -> int:
        """Queue one scope's spooled turns in one write, or one by one when the database refuses some of them
        (those are set aside); the scope's rows then hold only what is still to be queued. Returns how many
        were queued."""
        turns = await spool.load(scope)
        if not turns:
            return 0
        try:
            await self.engine.write_turn(scope, self.clock(), queued=turns)
        except RefusedDataError as exc:
            waiting = deque(turns)
            try:
                refused = await self.queue_apart(scope, waiting, exc)
            finally:
                await spool.keep(scope, list(waiting))
            return len(turns) - len(refused)
        await spool.keep(scope, [])
        return len(turns)

    async def count_turn(self, memory: MemoryTurn, session: Session, text: str) -> bool:
        """Count an answered turn toward the next extraction, before the turn is recorded (the countdown
        is kept with it: ``Session.state``); True when an extraction is due, which ``after_turn`` starts
        once the turn is queued."""
        return await self._cadence.count_turn(memory, session, text)

    def warm_reply(self, scope: Scope, answer: str) -> None:
        """The reply's vector for the next turn's window, made in the background while the reply is sent."""
        if self.engine.dense is not None:  # no task a turn without semantic recall
            self._spawn(self.engine.warm_reply(answer), f"warm-{scope.key}")

    def after_turn(self, scope: Scope, now: datetime, extract: bool) -> None:
        """After the recorded turn: the extraction ``count_turn`` found due, else a profile rebuild if due."""
        if extract:
            self.extract(scope)
        # No profile rebuild on a turn of its own: this turn waits in the queue, and the extraction that
        # reads it rebuilds a due profile in its own call, with what the turns tell.

    # ---- background work -------------------------------------------------------------------------

    def extract(self, scope: Scope) -> None:
        """Extract the scope's queued turns in the background, then rebuild its profile."""
        self._cadence.extract(scope)

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the background extractions and profile rebuilds."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._cadence.drain()
