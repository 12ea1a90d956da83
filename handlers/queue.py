"""Updates through the shared queue (``REDIS_URL``): Telegram's side of ``companion.ops.workers.workqueue``.

The receiving process (polling, or the webhook) does not handle an update: ``intake`` is a dispatcher whose
only work is to add each update to its chat's shard, before Telegram is told it arrived (the webhook answers
once it is added; polling confirms it with the next ``getUpdates``). ``Consumer`` is every worker's side: the
updates of the shards it holds go to the real dispatcher as concurrent tasks, started in order, so the
per-user order middleware and the message buffer work as they do with polling. An update is acknowledged
once its effects are done: the handler returned and, for a buffered text, the buffer flushed and the
reply was delivered (``MessageBuffer.settled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import Bot, Dispatcher
from aiogram.types import Update

from companion.chat.buffer import Buffering
from companion.chat.pipeline import ChatService
from companion.ops.workers.workqueue import Entry, QueueError, ShardWorker, UpdateQueue, shard_of
from handlers.cleaning import KnownUpdates
from handlers.scope import scope_of

log = logging.getLogger(__name__)


def chat_id_of(update: Update) -> int:
    """The chat an update belongs to, which names its shard; an update of no chat (an inline query) goes
    by its sender."""
    event: Any = update.event
    for holder in (event, getattr(event, "message", None)):
        chat = getattr(holder, "chat", None)
        if chat is not None:
            return int(chat.id)
    sender = getattr(event, "from_user", None)
    return int(sender.id) if sender is not None else 0


QUEUE_RETRY_FIRST_S = 0.5
QUEUE_RETRY_MAX_S = 30.0


async def put_until_queued(queue: UpdateQueue, chat_id: int, update_id: int, payload: bytes,
                           sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
    """Add an update, trying again with back-off for as long as the queue is unreachable. Polling confirms an
    update only with its next request, which waits for this: an update is never confirmed to Telegram before it
    is in the queue, and a stop meanwhile leaves it with Telegram for the next start. One line when the queue
    fails and one when it is back."""
    delay = QUEUE_RETRY_FIRST_S
    failing = False
    while True:
        try:
            await queue.put(chat_id, update_id, payload)
        except QueueError as exc:
            if not failing:
                log.warning("%s; polling waits and tries again until the queue is back", exc)
                failing = True
            await sleep(delay)
            delay = min(delay * 2, QUEUE_RETRY_MAX_S)
            continue
        if failing:
            log.warning("the queue is back: update %d is queued, polling goes on", update_id)
        return


def intake(queue: UpdateQueue, *, wait: bool = False) -> Dispatcher:
    """A dispatcher that adds every update to the queue and handles none. ``wait`` (polling): an update the
    queue cannot take waits until it can (``put_until_queued``); otherwise (a webhook) the failure stands, the
    request is answered with an error and Telegram sends the update again."""
    dispatcher = Dispatcher()

    async def enqueue(handler: Callable[[Update, dict[str, Any]], Awaitable[Any]], update: Update,
                      data: dict[str, Any]) -> None:
        payload = update.model_dump_json(by_alias=True, exclude_unset=True).encode()
        if wait:
            await put_until_queued(queue, chat_id_of(update), update.update_id, payload)
        else:
            await queue.put(chat_id_of(update), update.update_id, payload)

    dispatcher.update.outer_middleware(KnownUpdates())  # nothing to queue for an update read as nothing
    dispatcher.update.outer_middleware(enqueue)  # type: ignore[arg-type]
    return dispatcher


class Consumer:
    """One worker: reads its shards and feeds the dispatcher until ``stop`` is set. The tasks still
    handling updates then are in ``handling``; the caller winds them down, then calls ``leave``."""

    def __init__(self, dispatcher: Dispatcher, bot: Bot, buffer: Buffering, worker: ShardWorker) -> None:
        self._dispatcher, self._bot, self._buffer, self.worker = dispatcher, bot, buffer, worker
        self.handling: set[asyncio.Task[None]] = set()
        worker.on_take = self._taken

    async def _taken(self, shards: frozenset[int]) -> None:
        """Another worker may have switched companion mode or gone on with a conversation in these shards'
        chats: read them again."""
        chat: ChatService = self._dispatcher["chat"]
        count = self.worker.shards
        await chat.taken_over(lambda scope: shard_of(scope.chat_id or scope.user_id, count) in shards)

    async def run(self, stop: asyncio.Event) -> None:
        await self.worker.start()
        log.info("worker %s started; holds %d of %d shards", self.worker.id, len(self.worker.held()),
                 self.worker.shards)
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                reading = asyncio.create_task(self.worker.read())
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    reading.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reading
                    break
                try:
                    entries = reading.result()
                except QueueError as exc:
                    log.warning("worker %s: %s; trying again", self.worker.id, exc)
                    await asyncio.wait({stopping}, timeout=1.0)
                    continue
                for entry in entries:
                    task = asyncio.create_task(self._handle(entry), name=f"update-{entry.id}")
                    self.handling.add(task)
                    task.add_done_callback(self.handling.discard)
        finally:
            stopping.cancel()

    async def leave(self) -> None:
        await self.worker.stop()

    async def _handle(self, entry: Entry) -> None:
        update = Update.model_validate_json(entry.payload, context={"bot": self._bot})
        try:
            await self._dispatcher.feed_update(self._bot, update)
            message = update.message
            key = scope_of(message) if message is not None else None
            if key is not None:
                await self._buffer.settled(key)
        except Exception:
            # The edge of the update's task (aiogram's error router answered the user already): the update
            # is acknowledged, as polling confirms an update whose handler failed. Handling it again would
            # fail again.
            log.exception("update %s failed", update.update_id)
        try:
            await self.worker.ack(entry)
        except QueueError as exc:
            log.warning("update %s done but not acknowledged, its next worker handles it again: %s",
                        update.update_id, exc)
