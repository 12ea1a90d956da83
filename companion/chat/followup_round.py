"""Follow-ups written first (push): the round that finds, for every user, a told event to ask about and
writes one message about it, composed by the model from that memory and the recent conversation.

Who may get one is ``core.followups.may_push`` (local hours, not on a day the user wrote, one a local day,
none after two unanswered in a row); which threads are due is the engine's (``engine.followups``, one indexed
read). A message is recorded before it is sent (at most once: a crash between the two loses it, never
repeats it); on a model outage nothing is recorded and the next round tries again. Only private memories of
users in companion mode who have not turned follow-ups off; a group's are never followed up."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from companion.chat import texts
from companion.chat.layout import history_messages
from companion.chat.persona import render_system_prompt
from companion.chat.pipeline import ChatService
from companion.core.errors import LLMError
from companion.core.models import Memory, Scope
from companion.engine.followup_threads import DueFollowUp
from companion.llm.client import LLMClient

log = logging.getLogger(__name__)

AT_ONCE = 4  # follow-ups composed and sent at the same time in one round
MAX_CHARS = 300  # a follow-up is a line or two; a broken endpoint's megabytes are cut
HISTORY = 10  # conversation turns the model sees when it writes first

# Sends a follow-up about memory ``handle`` to the scope's user; False when it could not be delivered.
FollowUpSender = Callable[[Scope, int, str], Awaitable[bool]]


def followup_messages(ask: str, history: Sequence[tuple[str, str | None]]) -> list[dict[str, str]]:
    """The one model call's messages: the companion's own system prompt, the recent conversation, and what
    to write about (``ask``, the engine's ``followups.prompt``: a system message, since the user said nothing)."""
    return [{"role": "system", "content": render_system_prompt()}, *history_messages(history[-HISTORY:]),
            {"role": "system", "content": ask}]


async def compose(llm: LLMClient, ask: str, history: Sequence[tuple[str, str | None]]) -> str | None:
    """The follow-up's words, or None when the model cannot write now (the next round tries again)."""
    try:
        text = await llm.chat(followup_messages(ask, history), purpose="followup", max_tokens=200)
    except LLMError as exc:
        log.warning("follow-up not written, the model failed: %s", exc)
        return None
    text = texts.plain(text).strip()
    if not text:
        return None
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class FollowUpRound:
    """One look at every user's due threads; ``enabled``: the operator's ``FOLLOWUPS`` switch."""

    chat: ChatService
    hours: tuple[int, int]
    enabled: bool = True

    async def __call__(self, now: datetime, send: FollowUpSender, *, only: Scope | None = None) -> int:
        """Returns how many follow-ups went out; ``only``: this scope's alone (the console's user)."""
        if not self.enabled:
            return 0
        # A few users written to at once: a round with many due waits on the model, not on one user after another.
        gate = asyncio.Semaphore(AT_ONCE)

        async def one(item: DueFollowUp) -> bool:
            async with gate:
                return await self._write(item.thread.scope, item.memory, now, item.first, send)

        due = await self.chat.engine.followups.to_write(now, self.hours, only=only)
        results = await asyncio.gather(*map(one, due), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):  # the others went out; the job's wrapper logs this one
                raise result
        return sum(bool(r) for r in results)

    async def _write(self, scope: Scope, memory: Memory, now: datetime, first: bool, send: FollowUpSender) -> bool:
        engine = self.chat.engine

        async def write(history: list[tuple[str, str | None]]) -> str | None:
            text = await compose(self.chat.llm, engine.followups.prompt(memory, now), history)
            return None if text is None else text + (texts.FOLLOWUP_HOW_TO_STOP if first else "")

        async def deliver(text: str) -> bool:
            # Recorded first: at most once, whatever happens after.
            if not await engine.followups.sent(scope, memory.id, now):
                return False  # forgotten while the model wrote
            return await send(scope, memory.id, text)

        return await self.chat.write_first(scope, memory.id, write, deliver)
