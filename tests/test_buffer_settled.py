"""``MessageBuffer.settled``: what the queue's acknowledgement waits for. It returns once the key's burst
was flushed and the flush finished, a text joining the burst included; neither a later turn of the same
key nor other keys hold it up."""

from __future__ import annotations

import asyncio
import contextlib

from companion.chat.buffer import MessageBuffer


async def test_settled_waits_for_the_whole_burst_and_its_flush() -> None:
    buffer = MessageBuffer(0.05)
    done: list[str] = []
    release, later = asyncio.Event(), asyncio.Event()

    async def flush(text: str) -> None:
        await release.wait()
        done.append(text)

    async def other(text: str) -> None:
        await later.wait()  # still running when "a" is settled: it must not hold "a" up

    buffer.push("a", "one", flush)
    buffer.push("b", "never", other)
    waiting = asyncio.create_task(buffer.settled("a"))
    await asyncio.sleep(0.01)
    buffer.push("a", "two", flush)  # restarts the quiet period: the same burst
    await asyncio.sleep(0.2)
    assert not waiting.done(), "the flush is still running"
    release.set()
    await asyncio.wait_for(waiting, 5)
    assert done == ["one\ntwo"]
    await asyncio.wait_for(buffer.settled("nobody"), 1)  # nothing buffered: at once
    later.set()
    await asyncio.wait_for(buffer.settled("b"), 5)


async def test_settled_returns_when_the_text_is_taken_back() -> None:
    buffer = MessageBuffer(60)

    async def flush(text: str) -> None:
        raise AssertionError("taken texts are not flushed")

    buffer.push("a", "one", flush)
    waiting = asyncio.create_task(buffer.settled("a"))
    await asyncio.sleep(0.01)
    assert buffer.take("a") == ["one"]
    await asyncio.wait_for(waiting, 5)


async def test_a_later_turn_does_not_hold_back_one_already_answered() -> None:
    buffer = MessageBuffer(0.01)
    first_started, release_first, release_second = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def first(text: str) -> None:
        first_started.set()
        await release_first.wait()

    async def second(text: str) -> None:
        await release_second.wait()

    buffer.push("a", "one", first)
    settling = asyncio.create_task(buffer.settled("a"))
    await first_started.wait()
    buffer.push("a", "two", second)  # the user goes on talking while "one" is answered
    later = asyncio.create_task(buffer.settled("a"))
    release_first.set()
    await asyncio.wait_for(settling, 5)  # "one" is done, although "two" is not
    assert not later.done(), "the later turn waits for its own flush"
    release_second.set()
    await asyncio.wait_for(later, 5)


async def test_a_keys_turns_are_answered_one_after_another() -> None:
    # The first answer's send is slow (a retry after a 5xx); the next turn must not overtake it.
    buffer = MessageBuffer(0.01)
    events: list[str] = []
    release = asyncio.Event()

    async def first(text: str) -> None:
        events.append("first started")
        await release.wait()
        events.append("first sent")

    async def second(text: str) -> None:
        events.append("second started")

    async def elsewhere(text: str) -> None:
        events.append("other key")

    buffer.push("a", "one", first)
    await asyncio.sleep(0.05)
    buffer.push("a", "two", second)
    buffer.push("b", "hi", elsewhere)
    await asyncio.sleep(0.1)
    assert events == ["first started", "other key"], "another key is not held up, the same key is"
    release.set()
    await asyncio.wait_for(buffer.settled("a"), 5)
    assert events == ["first started", "other key", "first sent", "second started"]


async def test_a_turn_waiting_for_the_one_before_is_abandoned_through_its_callback() -> None:
    # A stop that cannot wait cancels the flushes; one still waiting for the key's earlier turn must reach its
    # callback all the same (cancelled at its first wait), which keeps what the text said.
    buffer = MessageBuffer(0.01)
    kept: list[str] = []

    async def answer(text: str) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            kept.append(text)
            raise

    buffer.push("a", "one", answer)
    await asyncio.sleep(0.05)
    buffer.push("a", "two", answer)
    await asyncio.sleep(0.05)  # "two" now waits for "one"
    closing = asyncio.create_task(buffer.close())
    await asyncio.sleep(0.05)
    closing.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await closing
    await asyncio.sleep(0.05)
    assert sorted(kept) == ["one", "two"]
