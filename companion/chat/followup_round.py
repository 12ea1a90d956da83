"""Follow-ups written first (push): the round that finds, for every user, a told event to ask about and
writes one message about it, composed by the model from that memory and the recent conversation.

Who may get one is ``core.followup_rules.may_push`` (local hours, not on a day the user wrote, one a local
day, none after two unanswered in a row); which threads are due, the round and the record-then-send rule are
the engine's, the same for every host (``engine.followup_threads``: ``to_write``, one indexed read; ``round``;
``deliver``). A message is recorded before it is sent (at most once: a crash between the two loses it, never
repeats it); on a model outage nothing is recorded and the next round tries again. Only private memories of
users in companion mode who have not turned follow-ups off; a group's are never followed up."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from companion.chat import texts
from companion.chat.pipeline import ChatService
from companion.chat.prompt import history_messages, render_system_prompt
from companion.core.errors import LLMError
from companion.core.models import Memory, Scope
from companion.engine.followup_threads import DueFollowUp
from companion.llm.client import LLMClient

log = logging.getLogger(__name__)

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

        async def write(item: DueFollowUp) -> bool:
            return await self._write(item.thread.scope, item.memory, now, item.first, send)

        return await self.chat.engine.followups.round(now, self.hours, write, only=only)

    async def _write(self, scope: Scope, memory: Memory, now: datetime, first: bool, send: FollowUpSender) -> bool:
        engine = self.chat.engine

        async def write(history: list[tuple[str, str | None]]) -> str | None:
            text = await compose(self.chat.llm, engine.followups.prompt(memory, now), history)
            return None if text is None else text + (texts.FOLLOWUP_HOW_TO_STOP if first else "")

        async def deliver(text: str) -> bool:
            return await engine.followups.deliver(scope, memory.id, now, lambda: send(scope, memory.id, text))

        return await self.chat.write_first(scope, memory.id, write, deliver)
