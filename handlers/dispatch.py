"""What makes aiogram's routing of an update cheap, without changing where any update goes.

- Filters run on the event loop, not in a thread. aiogram runs every synchronous filter callback (each
  ``F.…`` magic filter is one) through ``asyncio.to_thread``: a thread hop, a context copy and a future per
  check. Ours only read attributes of the update, and an ordinary private text passes some thirty of them
  across the routers: that cost more CPU per message than the reply's model call (docs/benchmarks-history.md section
  15). Wrapped as coroutines they run inline, with the same arguments and the same results.
- A router that only answers commands is skipped at once for a message that cannot be one. Each ``Command``
  filter splits the text and raises and catches an exception to refuse it; a plain text met twenty of them.
  The gate asks what ``Command`` asks first: the first character after leading whitespace is a prefix.
"""

from __future__ import annotations

from typing import Any

from aiogram import Router
from aiogram.dispatcher.event.handler import FilterObject, HandlerObject
from aiogram.dispatcher.event.telegram import TelegramEventObserver
from aiogram.filters import Command
from aiogram.types import Message


def tune_routing(router: Router) -> None:
    """Run every synchronous filter of ``router`` and the routers under it inline, and gate the
    command-only routers (see the module's docstring)."""
    for each in router.chain_tail:
        for observer in each.observers.values():
            if not each.sub_routers:  # a failed router-wide filter would hide the routers under it too
                _gate_commands(observer)
            for handler in _handlers(observer):
                for filter_ in handler.filters or ():
                    _inline(filter_)


def _handlers(observer: TelegramEventObserver) -> list[HandlerObject]:
    # ``_handler`` holds the observer-wide filters (``router.message.filter(...)``).
    return [observer._handler, *observer.handlers]


def _inline(filter_: FilterObject) -> None:
    if filter_.awaitable:
        return
    check = filter_.callback

    async def inline(*args: Any, **kwargs: Any) -> Any:
        return check(*args, **kwargs)

    # ``params`` was read from the original callback's signature, so the same keyword arguments reach it.
    filter_.callback = inline
    filter_.awaitable = True


def _gate_commands(observer: TelegramEventObserver) -> None:
    """An observer whose every handler needs a ``Command`` gets the gate as its first observer-wide filter."""
    commands: list[Command] = []
    for handler in observer.handlers:
        found = [f.callback for f in handler.filters or () if isinstance(f.callback, Command)]
        if not found:
            return
        commands.extend(found)
    if not commands:
        return
    prefixes = frozenset("".join(c.prefix for c in commands))

    async def may_be_command(event: Any, /, **_: Any) -> bool:
        # Command.__call__ reads ``text or caption``; extract_command splits it on whitespace and takes the
        # first character as the prefix.
        text = (event.text or event.caption) if isinstance(event, Message) else None
        return text is not None and text.lstrip()[:1] in prefixes

    if observer._handler.filters is None:
        observer._handler.filters = []
    observer._handler.filters.insert(0, FilterObject(may_be_command))
