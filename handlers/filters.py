"""Filters aiogram awaits on the event loop.

aiogram runs a filter that is not a coroutine (each ``F.…`` magic filter, a plain function) through
``asyncio.to_thread``: a thread hop, a context copy and a future per check. Ours only read attributes of the
update, and an ordinary private text passed some thirty of them across the routers: that cost more CPU per
message than the reply's model call (docs/benchmarks-history.md section 15). aiogram awaits an
``aiogram.filters.Filter`` instance directly (``FilterObject`` marks it awaitable), so ``Inline`` wraps such a
check and runs it inline, with the same argument and the same result. ``tests/test_filters.py`` fails on any
filter of the bot's routers that would still go to a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiogram import F
from aiogram.filters import Filter
from aiogram.types import TelegramObject
from aiogram.utils.magic_filter import MagicFilter


class Inline(Filter):
    """A synchronous check of the event (a magic filter or a function of the event alone)."""

    def __init__(self, check: MagicFilter | Callable[[Any], Any]) -> None:
        self._shown = repr(check)
        # What aiogram itself calls for a magic filter (``FilterObject``): resolve, not the filter's __call__.
        self._check: Callable[[Any], Any] = check.resolve if isinstance(check, MagicFilter) else check

    async def __call__(self, event: TelegramObject, /) -> Any:
        # The check's own value, as aiogram would pass it on: only its truth is read (none returns a dict).
        return self._check(event)

    def __repr__(self) -> str:
        return f"Inline({self._shown})"


PREFIX = "/"  # every command's (aiogram's default): the routers tell a command from talk by it
IN_PRIVATE = Inline(F.chat.type == "private")
TEXT = Inline(F.text & ~F.text.startswith(PREFIX))  # talk, not a command
CAPTION = Inline(F.caption & ~F.caption.startswith(PREFIX))
