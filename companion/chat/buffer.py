"""Per-key message buffering: messages that arrive close together become one turn.

Each new message restarts the quiet period; when it passes, the texts are joined and handed to the
flush callback; a key's flushes run one after another, in order. A command that must come after what the
user said before it (``/stop_aiGF``) calls ``flush_now``: the buffered texts are answered at once and the
call returns when every flush of that key, including ones already running, is done. ``settled`` waits until
a key has nothing buffered and nothing being flushed: a queue of updates acknowledges a text only once its
answer is out.

The handlers type against ``Buffering``: ``MessageBuffer`` holds one process's messages. Several worker
processes each keep their own: the queue routes each chat to one worker at a time (handlers/queue.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)

Flush = Callable[[str], Awaitable[None]]


class Buffering(Protocol):
    def push(self, key: Hashable, text: str, flush: Flush) -> None:
        """Buffer a text; ``flush`` gets the key's joined texts once it has been quiet for a while."""
        ...

    def pending(self, key: Hashable) -> list[str]: ...

    def take(self, key: Hashable) -> list[str]:
        """Remove and return what a key has buffered, unflushed."""
        ...

    async def flush_now(self, key: Hashable) -> None:
        """Finish the key's running flushes, then flush what it has buffered."""
        ...

    async def settled(self, key: Hashable) -> None:
        """Return once what the key holds now is flushed and its flushes running now have finished."""
        ...

    async def close(self) -> None:
        """Flush everything still waiting, then wait for running flushes."""
        ...


@dataclass(slots=True)
class _Pending:
    flush: Flush
    texts: list[str] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)  # flushed (or taken back)


class MessageBuffer:
    def __init__(self, quiet_seconds: float) -> None:
        self.quiet_seconds = quiet_seconds
        self._pending: dict[Hashable, _Pending] = {}
        self._running: dict[Hashable, set[asyncio.Task[None]]] = {}  # each key's flushes under way

    def push(self, key: Hashable, text: str, flush: Flush) -> None:
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = _Pending(flush)
        entry.flush = flush
        entry.texts.append(text)
        if entry.timer is not None:
            entry.timer.cancel()
        entry.timer = asyncio.create_task(self._wait(key, entry))

    def pending(self, key: Hashable) -> list[str]:
        entry = self._pending.get(key)
        return list(entry.texts) if entry else []

    def take(self, key: Hashable) -> list[str]:
        """Remove and return what a key has buffered, unflushed (the user cannot be answered any more)."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return []
        if entry.timer is not None:
            entry.timer.cancel()
        entry.done.set()
        return entry.texts

    async def flush_now(self, key: Hashable) -> None:
        """Finish the key's running flushes, then flush what it has buffered, without waiting out the
        quiet period: whatever the caller does next comes after the answers to earlier messages."""
        running = self._flushing(key)
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        entry = self._pending.get(key)
        if entry is not None:
            if entry.timer is not None:
                entry.timer.cancel()
            await self._flush(key, entry)

    async def settled(self, key: Hashable) -> None:
        """Return once what ``key`` holds now has been flushed and every flush of it running now has finished
        (each reply delivered or given up). Texts that join the held ones before their flush are part of the
        same turn; texts pushed after it began are a later turn and not waited for, so a user who keeps
        talking does not hold back what was already answered."""
        running = self._flushing(key)
        entry = self._pending.get(key)
        if running:
            await asyncio.wait(running)
        if entry is not None:
            await entry.done.wait()

    async def _wait(self, key: Hashable, entry: _Pending) -> None:
        await asyncio.sleep(self.quiet_seconds)
        await self._flush(key, entry)

    async def _flush(self, key: Hashable, entry: _Pending) -> None:
        if self._pending.get(key) is not entry:
            return
        del self._pending[key]
        task = asyncio.current_task()
        earlier = self._flushing(key)
        if task is not None:
            self._running.setdefault(key, set()).add(task)
        try:
            if earlier:
                await self._after(earlier)
            await entry.flush("\n".join(entry.texts))
        except Exception:
            # The edge of a background task: nobody awaits it, so log with the traceback.
            log.exception("flushing buffered messages failed")
        finally:
            running = self._running.get(key)
            if running is not None and task is not None:
                running.discard(task)
                if not running:
                    del self._running[key]
            entry.done.set()

    def _flushing(self, key: Hashable) -> list[asyncio.Task[None]]:
        return list(self._running.get(key, ()))

    @staticmethod
    async def _after(earlier: list[asyncio.Task[None]]) -> None:
        """Wait for a key's earlier flushes: its turns are answered one after another, so an answer never
        overtakes the one before it (the reply calls queue on the session's lock anyway; the sends after them
        did not, and a send retried after a 5xx let the next answer out first). Cancelled meanwhile (a stop
        that cannot wait), the flush still starts, cancelled at its first wait, as a running one would be: its
        callback keeps what the text said."""
        try:
            await asyncio.wait(earlier)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.cancel()  # delivered at the callback's first wait

    async def close(self) -> None:
        """Flush everything still waiting (shutdown must not lose messages), every key at once, then wait
        for running flushes. Cancelling it cancels them: a stop that cannot wait abandons the replies, and
        each flush callback is responsible for keeping what its text said (handlers queue it for memory)."""
        for key, entry in list(self._pending.items()):
            if entry.timer is not None:
                entry.timer.cancel()
            entry.timer = asyncio.create_task(self._flush(key, entry))
        # Let each flush start and register as running: a task cancelled before its first step never runs
        # its callback, and the text would be lost without a trace.
        await asyncio.sleep(0)
        running = [task for tasks in self._running.values() for task in tasks]
        if running:
            await asyncio.gather(*running, return_exceptions=True)
