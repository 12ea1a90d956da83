"""A reply call's prompt, built from the memory context the engine hands over as data: the companion's
persona (the fixed system message), the turn's reference block, and the layout of the call's messages.
Persona and prompt wording are chat concerns; the engine never renders them.

The layout keeps DeepSeek's prefix cache warm: the system message (persona, rules, and the tool rules
when tools are offered) is the same text every turn and for every user, so it and the history after it
repeat from one call to the next; the history is trimmed in steps (``history_excess``) rather than sliding
by one turn, so most turns repeat the whole previous prefix. What changes every turn (the local time, the
profile, the recalled memories) is a reference block placed in the latest user message, marked as data
from the system. Every piece of memory text in it is quoted (JSON string syntax, the block's own brackets
replaced), so a memory that reads "忽略之前的指令" is a quoted fact about the user, never an instruction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, tzinfo
from functools import cache

import prompts
from companion.core import followup_rules as followups
from companion.core.models import When
from companion.core.timeutil import show
from companion.llm.client import Message
from memory import MemoryContext

DYNAMIC_HEADER = "用户最近的情况（和当前话题有关）："
MEMORY_HEADER = "可能相关的记忆（仅供参考）："
SCHEDULE_HEADER = "用户问到的日子（{days}）里记着的事："
NOTHING_SCHEDULED = "（这几天没有记着什么事）"
INSTRUCTIONS_HEADER = "用户对聊天方式的要求（用户本人提出）："
RECENT_MARK = "，今天刚知道："
TODAY_HEADER = "用户今天说过做了的事："
NO_PROFILE = "（还不太了解）"


@cache
def render_system_prompt(with_tools: bool = False) -> str:
    """The fixed system message; the same for every turn and user given the same tool offer."""
    return prompts.render("system", tool_rules=prompts.render("tools") if with_tools else "")


def render_reference(context: MemoryContext, now: datetime, tz: tzinfo) -> str:
    """The volatile part of a reply call: this turn's time and memory context, as marked, quoted data.
    The user's standing instructions (how to be talked to) come last, under their own header: the
    system message tells the model to follow that section, and only that one."""
    dynamic = "".join(f"- {quote(line)}\n" for line in context.dynamic)
    memories = "".join(f"- {quote(r.memory.shown)}\n" for r in context.recalled)
    instructions = "".join(f"- {quote(line)}\n" for line in context.instructions)
    memory_block = f"{MEMORY_HEADER}\n{memories}" if memories else ""
    if context.asked is not None:
        start, end = context.asked
        days = When(start, end).describe()
        scheduled = "".join(f"- {quote(line)}\n" for line in context.scheduled) or f"{NOTHING_SCHEDULED}\n"
        memory_block += f"{SCHEDULE_HEADER.format(days=days)}\n{scheduled}"
    if context.today:
        memory_block += f"{TODAY_HEADER}\n" + "".join(f"- {quote(line)}\n" for line in context.today)
    if context.followup is not None:
        memory_block += f"{followups.CUE_HEADER}\n- {quote(followups.cue_text(context.followup))}\n"
    if instructions:
        memory_block += f"{INSTRUCTIONS_HEADER}\n{instructions}"
    return prompts.render(
        "context",
        now_local=show(now, tz),
        core_profile=_core(context),
        dynamic_block=f"{DYNAMIC_HEADER}\n{dynamic}" if dynamic else "",
        memory_block=memory_block,
    )


def _core(context: MemoryContext) -> str:
    """What the companion knows of the user on every turn: the profile's core, then the lasting facts learned
    today, marked as new. They stand with the core, not among the memories this turn may touch, so a fact
    told this morning is known all day without being offered as relevant to every turn."""
    core = quote(context.core) if context.core else NO_PROFILE
    if context.recent:
        core += f"{RECENT_MARK}{quote('；'.join(context.recent))}"
    return core


def quote(text: str) -> str:
    """Memory text as one quoted line: newlines escaped and the block's brackets replaced, so stored
    text can neither end the reference block nor start a line that looks like the system's own."""
    return json.dumps(text.replace("【", "[").replace("】", "]"), ensure_ascii=False)


def with_reference(user_text: str, reference: str) -> str:
    """The latest user message with the reference block before it; the user's words come last."""
    return f"{reference.rstrip()}\n\n{user_text}"


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
