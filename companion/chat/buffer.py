"""Per-key message buffering: messages that arrive close together become one turn.

Each new message restarts the quiet period; when it passes, the texts are joined and handed to the
flush callback. Flushes of one key run one after another, in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Flush = Callable[[str], Awaitable[None]]


@dataclass(slots=True)
class _Pending:
    flush: Flush
    texts: list[str] = field(default_factory=list)
    timer: asyncio.Task[None] | None = None


class MessageBuffer:
    def __init__(self, quiet_seconds: float) -> None:
        self.quiet_seconds = quiet_seconds
        self._pending: dict[Hashable, _Pending] = {}
        self._running: set[asyncio.Task[None]] = set()

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

    def cancel(self, key: Hashable) -> int:
        """Drop what a key has buffered (the user switched the companion off). Returns messages dropped."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return 0
        if entry.timer is not None:
            entry.timer.cancel()
        return len(entry.texts)

    async def _wait(self, key: Hashable, entry: _Pending) -> None:
        await asyncio.sleep(self.quiet_seconds)
        if self._pending.get(key) is not entry:
            return
        del self._pending[key]
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            await entry.flush("\n".join(entry.texts))
        except Exception:
            # The edge of a background task: nobody awaits it, so log with the traceback.
            log.exception("flushing buffered messages failed")
        finally:
            if task is not None:
                self._running.discard(task)

    async def close(self) -> None:
        """Flush everything still waiting (shutdown must not lose messages), then wait for running flushes."""
        for key, entry in list(self._pending.items()):
            if entry.timer is not None:
                entry.timer.cancel()
            del self._pending[key]
            try:
                await entry.flush("\n".join(entry.texts))
            except Exception:
                log.exception("flushing buffered messages at shutdown failed")
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
