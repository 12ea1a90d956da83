"""The tool loop of one reply: the model may call tools for a bounded number of rounds and seconds,
then must answer in words. The user always gets a reply: when the bound is reached, one last call
with ``tool_choice="none"`` asks for the answer from what the tools returned so far.

The last call keeps the ``tools`` list (only forbidding calls): the tool definitions stay part of the
cached prompt prefix, and the tool messages already in the conversation stay valid for the API.
Follow-up rounds are accounted as ``<purpose>_tool`` so the cost of tools shows up on its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from companion.core.errors import LLMBadResponseError
from companion.llm.client import Completion, LLMClient, Message, ToolCall
from companion.llm.toolkit import ToolOutcome, Toolset

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopLimits:
    max_rounds: int = 3  # model calls that may call tools; after them one more call, without tool calls
    max_seconds: float = 20.0  # wall time for the rounds with tools; the last call has the SDK's own timeout
    max_calls_per_round: int = 4  # further calls in one answer get an error instead of running

    def __post_init__(self) -> None:
        if self.max_rounds < 1 or self.max_seconds <= 0 or self.max_calls_per_round < 1:
            raise ValueError(f"tool loop limits must be positive: {self}")


@dataclass(frozen=True, slots=True)
class LoopResult:
    text: str
    calls: int  # model calls made, the first included
    outcomes: tuple[ToolOutcome, ...] = ()
    bounded: bool = False  # the rounds or the time ran out and the last call was forced


async def run_tool_loop(
    llm: LLMClient, messages: Sequence[Message], toolset: Toolset, *, purpose: str = "reply",
    limits: LoopLimits = LoopLimits(), temperature: float = 0.8, max_tokens: int = 800,
    clock: Callable[[], float] = time.monotonic,
) -> LoopResult:
    """Answer ``messages``, letting the model use ``toolset``. With an empty toolset this is exactly
    ``llm.chat``: no tools field is sent. LLM errors propagate; tool errors never do."""
    if not toolset:
        return LoopResult(await llm.chat(messages, purpose=purpose, temperature=temperature,
                                         max_tokens=max_tokens), calls=1)
    specs = toolset.specs()
    conversation = list(messages)
    outcomes: list[ToolOutcome] = []
    deadline = clock() + limits.max_seconds
    for round_ in range(limits.max_rounds):
        completion = await llm.complete(
            conversation, purpose=purpose if round_ == 0 else f"{purpose}_tool", tools=specs,
            tool_choice="auto", temperature=temperature, max_tokens=max_tokens,
        )
        if not completion.tool_calls:
            return LoopResult(_text(completion, purpose), calls=round_ + 1, outcomes=tuple(outcomes))
        conversation.append(completion.assistant_message())
        done = await _run_calls(toolset, completion.tool_calls, limits, deadline, clock)
        outcomes.extend(done)
        conversation.extend(outcome.message() for outcome in done)
        if clock() >= deadline:
            break
    log.info("%s: tool loop bounded after %d round(s), %d tool call(s)", purpose, round_ + 1, len(outcomes))
    final = await llm.complete(
        conversation, purpose=f"{purpose}_tool", tools=specs, tool_choice="none",
        temperature=temperature, max_tokens=max_tokens,
    )
    return LoopResult(_text(final, purpose), calls=round_ + 2, outcomes=tuple(outcomes), bounded=True)


async def _run_calls(
    toolset: Toolset, calls: Sequence[ToolCall], limits: LoopLimits, deadline: float, clock: Callable[[], float]
) -> list[ToolOutcome]:
    """Run the calls of one answer in order (a later call may depend on an earlier write); every call
    gets a tool message, as the API requires, even the ones not run."""
    outcomes: list[ToolOutcome] = []
    for index, call in enumerate(calls):
        if index >= limits.max_calls_per_round:
            outcome = ToolOutcome.error(call, f"not run: at most {limits.max_calls_per_round} tool calls per answer")
        elif clock() >= deadline:
            outcome = ToolOutcome.error(call, "not run: no time left for tools this turn; answer the user now")
        else:
            try:
                async with asyncio.timeout(deadline - clock()):
                    outcome = await toolset.dispatch(call)
            except TimeoutError:
                log.warning("tool %s ran out of time", call.name)
                outcome = ToolOutcome.error(call, "the tool took too long; answer the user without it")
        outcomes.append(outcome)
    return outcomes


def _text(completion: Completion, purpose: str) -> str:
    if completion.content is None:
        raise LLMBadResponseError(f"{purpose}: tool calls where an answer in words was required")
    return completion.content
