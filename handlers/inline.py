"""Filters run on the event loop, not in a thread.

aiogram runs every synchronous filter callback (each ``F.…`` magic filter is one) through
``asyncio.to_thread``: a thread hop, a context copy and a future per check. Our filters only read
attributes of the update, and an ordinary private text passes some thirty of them across the routers,
which cost more CPU per message than the reply's whole model call (BENCHMARKS.md section 15). Wrapped
as coroutines they run inline, with the same arguments and the same results.
"""

from __future__ import annotations

from typing import Any

from aiogram import Router
from aiogram.dispatcher.event.handler import FilterObject, HandlerObject


def run_filters_inline(router: Router) -> None:
    """Every synchronous filter of ``router`` and the routers under it becomes a coroutine."""
    for each in router.chain_tail:
        for observer in each.observers.values():
            # ``_handler`` holds the observer-wide filters (``router.message.filter(...)``).
            handlers: list[HandlerObject] = [observer._handler, *observer.handlers]
            for handler in handlers:
                for filter_ in handler.filters or ():
                    _inline(filter_)


def _inline(filter_: FilterObject) -> None:
    if filter_.awaitable:
        return
    check = filter_.callback

    async def inline(*args: Any, **kwargs: Any) -> Any:
        return check(*args, **kwargs)

    # ``params`` was read from the original callback's signature, so the same keyword arguments reach it.
    filter_.callback = inline
    filter_.awaitable = True
