"""Stopping within a bound: what finishes quickly finishes, the rest is abandoned safely.

On SIGTERM the bot answers what is buffered, lets replies and extractions in flight run, and waits for
other background work (the start-up catch-up) for at most ``timeout - grace`` seconds. Whatever still runs
then is cancelled, and the last ``grace`` seconds let the cancelled work unwind:

- a reply cancelled while the model is thinking queues the user's text for memory (the handlers do that)
  and sends nothing; the user gets no answer, and the next start extracts what they said;
- an extraction cancelled mid-way rolls its transaction back (SQLite storage rolls back on any
  exception, cancellation included): its turns stay queued, no memory is half-written;
- a backup cancelled mid-way leaves its in-progress marker, so restore never takes it for whole.

A stop that does not need the bound costs nothing: everything finished is returned at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from companion.chat.buffer import Buffering
from companion.chat.pipeline import ChatService

log = logging.getLogger(__name__)

GRACE_SHARE = 0.25  # of the timeout, kept for cancelled work to unwind (queue texts, roll back)
GRACE_MAX_SECONDS = 2.0


def grace_for(timeout: float) -> float:
    return min(timeout * GRACE_SHARE, GRACE_MAX_SECONDS)


async def wind_down(
    chat: ChatService, buffer: Buffering | None, others: Sequence[asyncio.Task[Any]], timeout: float,
) -> bool:
    """Finish or abandon the background work within ``timeout`` seconds; True when nothing was abandoned."""
    grace = grace_for(timeout)
    try:
        await asyncio.wait_for(_finish(chat, buffer, others), timeout - grace)
        return True
    except TimeoutError:
        # wait_for cancelled the gather inside, and with it every reply, extraction and task it waited for.
        log.warning("stopping: work still running after %.1f s is abandoned (its turns stay queued)", timeout - grace)
    for task in others:
        task.cancel()
    try:
        await asyncio.wait_for(_unwind(chat, buffer, others), grace)
    except TimeoutError:
        log.warning("stopping: cancelled work did not unwind within %.1f s", grace)
    return False


async def _finish(chat: ChatService, buffer: Buffering | None, others: Sequence[asyncio.Task[Any]]) -> None:
    # Replies, extractions and the rest run side by side; a reply finished late may spawn one more
    # extraction, hence the second drain. A task cancelled before the stop (or failed) is no reason to
    # stop waiting for the others.
    await asyncio.gather(buffer.close() if buffer is not None else asyncio.sleep(0), chat.drain(), *others,
                         return_exceptions=True)
    await chat.drain()


async def _unwind(chat: ChatService, buffer: Buffering | None, others: Sequence[asyncio.Task[Any]]) -> None:
    await asyncio.gather(buffer.close() if buffer is not None else asyncio.sleep(0), chat.drain(), *others,
                         return_exceptions=True)
