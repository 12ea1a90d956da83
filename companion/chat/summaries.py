"""Conversation summaries: after some minutes of silence, and when the user ends the conversation
(``/reset``), what was said since the last summary becomes a short-term memory (``engine.summarise``).
At most one idle summary waits per scope; a new turn replaces it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from companion.chat.session import Session
from companion.core.errors import LLMError, StorageError
from companion.core.models import Memory, Scope, Turn
from memory import MemoryEngine

log = logging.getLogger(__name__)

SUMMARY_MIN_TURNS = 2


class Summaries:
    def __init__(self, engine: MemoryEngine, clock: Callable[[], datetime], idle_seconds: float,
                 current: Callable[[Scope], Session | None]) -> None:
        self.engine = engine
        self.clock = clock
        self.idle_seconds = idle_seconds
        self._current = current  # the scope's session now: a summary of a conversation that went is dropped
        self._idle: dict[Scope, asyncio.Task[None]] = {}

    def schedule(self, scope: Scope, session: Session) -> None:
        """After some minutes of silence the conversation is summarised, without clearing the context."""
        self.cancel(scope)
        turn = session.turn

        async def later() -> None:
            await asyncio.sleep(self.idle_seconds)
            if self._current(scope) is session and session.turn == turn:
                async with session.lock:
                    await self.summarise(scope, session)

        task = asyncio.create_task(later(), name=f"idle-{scope.key}")
        self._idle[scope] = task
        task.add_done_callback(lambda t: self._idle.pop(scope, None) if self._idle.get(scope) is t else None)

    def cancel(self, scope: Scope) -> None:
        idle = self._idle.pop(scope, None)
        if idle is not None:
            idle.cancel()

    def cancel_all(self) -> None:
        for task in list(self._idle.values()):
            task.cancel()

    async def summarise(self, scope: Scope, session: Session) -> Memory | None:
        """The turns since the last summary, if there are enough of them; a failure keeps nothing (the
        turns are queued for extraction anyway)."""
        turns = [Turn(user=t.user, reply=t.reply, at=self.clock(), key=t.key)
                 for t in list(session.history)[session.summarised_turn:]]
        if len(turns) < SUMMARY_MIN_TURNS:
            return None
        session.summarised_turn = len(session.history)
        try:
            return await self.engine.summarise(scope, turns, self.clock())
        except (LLMError, StorageError) as exc:
            log.warning("conversation summary for %s failed: %s", scope.key, exc)
            return None
