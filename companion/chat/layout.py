"""A reply call's messages, laid out for DeepSeek's prefix cache (see ``persona``): the fixed system
message, the history, then the latest user message carrying this turn's reference block. The history is
trimmed in steps (``history_excess``) rather than sliding by one turn, so most turns repeat the whole
previous prefix."""

from __future__ import annotations

from collections.abc import Sequence

from companion.chat.persona import render_system_prompt, with_reference
from companion.llm.client import Message


def history_excess(length: int, keep: int) -> int:
    """How many of the oldest turns to drop once a turn is recorded. The history grows to ``2 * keep - 1``
    turns and is then cut back to ``keep``: every call sees at least ``keep`` past turns, and the prompt
    prefix changes at the cut only, one turn in ``keep``, instead of every turn as a sliding window would.
    (Cutting every ``keep // 2`` turns sends fewer tokens but misses the cache more often, and costs more
    in the cost benchmark; BENCHMARKS.md, "Prompt cache".)"""
    return length - keep if length >= 2 * keep else 0


def reply_messages(
    history: Sequence[tuple[str, str | None]], text: str, reference: str, *, with_tools: bool = False,
    note: str | None = None,
) -> list[Message]:
    """A reply call's messages: fixed system message, history, then the latest user message (merged with
    any unanswered turns) carrying this turn's reference block. ``note`` (a group turn's warning about
    the quoted lines of other members) is a system message just before that last message, so the cached
    prefix before it stays the same."""
    messages = merge_user_message([{"role": "system", "content": render_system_prompt(with_tools)},
                                   *history_messages(history)], text)
    notes: list[Message] = [{"role": "system", "content": note}] if note else []
    return [*messages[:-1], *notes,
            {"role": "user", "content": with_reference(messages[-1]["content"], reference)}]


def history_messages(history: Sequence[tuple[str, str | None]]) -> list[Message]:
    """Past turns as chat messages; a turn that got no reply folds into the next user message."""
    messages: list[Message] = []
    waiting: list[str] = []
    for user, reply in history:
        if user:  # a message the companion wrote first has no user side
            waiting.append(user)
        if reply is not None:
            if waiting:
                messages.append({"role": "user", "content": "\n".join(waiting)})
            messages.append({"role": "assistant", "content": reply})
            waiting = []
    if waiting:
        messages.append({"role": "user", "content": "\n".join(waiting)})
    return messages


def merge_user_message(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[-1]["role"] == "user":
        return [*messages[:-1], {"role": "user", "content": f"{messages[-1]['content']}\n{text}"}]
    return [*messages, {"role": "user", "content": text}]
