"""The user steering memory in conversation: "记住……" saves with a receipt, "忘掉……" finds what to
forget, an edit takes the next message, and pending review suggestions are answered in words.

Shared by Telegram and the console (through ``ChatService``); buttons are the handlers' business, so the
results here are data (``Outcome``), never keyboards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from companion.chat import texts
from companion.chat.intents import Kind, read_intent, read_review_answer
from companion.core import tiers
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.extraction import tells
from companion.core.models import Memory, Scope, Status, StatusReason
from memory import MemoryEngine

FORGET_MATCHES = 5
H = TypeVar("H", bound=tuple[Any, ...])


@dataclass(slots=True)
class SteeringState:
    """Per conversation: a receipt's "edit" waits for the next message; review suggestions shown at
    the start of a conversation wait for an answer in words."""

    editing: int | None = None
    review: list[tuple[Memory, tiers.Suggestion]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Outcome:
    text: str
    saved: Memory | None = None  # a receipt: handlers add fine / edit / forget buttons
    replaced: Memory | None = None  # the words the save replaced: handlers add an undo button
    to_forget: tuple[Memory, ...] = ()  # candidates: handlers ask for a confirmation
    forget_all: int | None = None  # "全部忘掉": handlers ask for a confirmation (memories it would forget)


async def steer(
    engine: MemoryEngine, scope: Scope, state: SteeringState, text: str, previous: str | None, now: datetime,
    *, chat_id: int | None = None, message_id: int | None = None, turns: Sequence[str] = (),
) -> Outcome | None:
    """Handle the message if it steers memory; None means it is ordinary talk. ``turns``: the keys of the
    previous turn and this one, which a save came from."""
    if state.editing is not None:
        handle, state.editing = state.editing, None
        try:
            memory = await engine.edit(scope, handle, text, now)
        except (MemoryNotFoundError, NotYourMemoryError):
            return Outcome(texts.MEMORY_GONE)
        return Outcome(texts.receipt(memory, edited=True), saved=memory)
    if state.review:
        answer = read_review_answer(text, [s.action for _, s in state.review])
        if answer is not None:
            pending, state.review = state.review, []
            # A forget here reaches the session's turns through the engine's followers (``chat.followers``).
            lines = [await _apply(engine, scope, memory, action, now)
                     for (memory, _), action in zip(pending, answer, strict=True)]
            return Outcome("\n".join(lines))
    intent = read_intent(text)
    if intent is None:
        return None
    if intent.kind is Kind.SAVE_PREVIOUS:
        if not previous:
            return Outcome(texts.NOTHING_TO_SAVE)
        intent_text = previous
    elif intent.kind is Kind.SAVE:
        intent_text = intent.text
    elif intent.kind is Kind.FORGET_ALL:
        count = await forget_all_count(engine, scope)
        return Outcome(texts.confirm_forget_all(count), forget_all=count)
    else:
        found = await engine.search(scope, intent.text, now, limit=FORGET_MATCHES)
        if not found:
            return Outcome(texts.nothing_found(intent.text))
        return Outcome(texts.confirm_forget(found), to_forget=tuple(found))
    saved = await engine.save_said(scope, intent_text, now, source_chat_id=chat_id, source_message_id=message_id,
                                   source_turns=turns if intent.kind is Kind.SAVE_PREVIOUS else turns[-1:])
    return Outcome(texts.receipt(saved.memory, replaced=saved.replaced, date_unclear=saved.date_unclear),
                   saved=saved.memory, replaced=saved.replaced)


async def forget_all_count(engine: MemoryEngine, scope: Scope) -> int:
    """The memories forgetting everything would forget (what the confirmation names). Zero still leaves
    something to wipe: queued turns, short-term context and summaries not learned yet."""
    return sum(m.status_reason != StatusReason.REWORDED  # a memory's earlier words are part of it, not one more
               for m in await engine.memories(scope, {Status.ACTIVE, Status.ARCHIVED, Status.SUPERSEDED}))


async def _apply(engine: MemoryEngine, scope: Scope, memory: Memory, action: tiers.Action, now: datetime) -> str:
    try:
        if action is tiers.Action.FORGET:
            after = await engine.get(scope, memory.id)  # owner check before anything changes
            await engine.forget(scope, [memory.id])
        else:
            after = await engine.review(scope, memory.id, action, now)
    except (MemoryNotFoundError, NotYourMemoryError):
        return texts.MEMORY_GONE
    return texts.review_done(after, action)


async def opening_reviews(engine: MemoryEngine, scope: Scope, state: SteeringState, now: datetime,
                          unanswered: bool) -> str | None:
    """At the start of a conversation: one short line when reviews have waited too long, with a
    suggestion per memory; the answer comes in words ("按你说的办", "第一个升级，第二个删除")."""
    if not unanswered:
        return None
    due = await engine.due_reviews(scope, now)
    if not due:
        return None
    state.review = due[: texts.REVIEW_BATCH]
    return texts.pending_reviews(state.review)


def scrub(history: Sequence[H], forgotten: Sequence[Memory]) -> list[H]:
    """Short-term context (turns whose first two items are the user's words and the reply) without the
    turns whose words tell what was just forgotten."""
    return [t for t in history if not any(tells(t[0], m) or (t[1] and tells(t[1], m)) for m in forgotten)]
