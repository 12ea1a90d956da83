"""How a long-running process runs: its event loop and its garbage collector.

uvloop (libuv under asyncio's API) does each loop iteration, timer and socket operation in C: the bot's
work per message is mostly many small awaits on sockets, so it costs ~13% less CPU on it (docs/benchmarks-history.md
section 19). It is an optional dependency: where it is missing (Windows) the standard loop runs.

Python's cyclic garbage collector walks every tracked object of the oldest generation on each full
collection. After start-up that is ~110,000 objects that live as long as the process (the dictionaries,
aiogram's and pydantic's types): five full collections in a 3,000-message burst took ~1.1 s of CPU, and the
youngest generation's threshold of 700 allocations ran ~600 collections more. ``settle_heap`` moves what
start-up built out of the collector's sight (``gc.freeze``) and collects young objects less often; objects
still become garbage by reference counting at once, only reference cycles wait a little longer.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from companion.core.errors import ConfigError

log = logging.getLogger(__name__)

EventLoopChoice = Literal["auto", "uvloop", "asyncio"]
T = TypeVar("T")

# Allocations between young collections (CPython's default: 700), and how many young (middle) collections
# make a middle (full) one. Measured in docs/benchmarks-history.md section 19: ~600 -> ~30 collections per
# 3,000 messages.
GC_THRESHOLDS = (10_000, 20, 100)


def loop_factory(choice: EventLoopChoice) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop's constructor for ``choice``; None: asyncio's own. ``auto`` takes uvloop where it is
    installed; ``uvloop`` without it is a configuration error."""
    if choice == "asyncio" or (choice == "auto" and importlib.util.find_spec("uvloop") is None):
        return None
    try:
        import uvloop
    except ImportError as exc:
        raise ConfigError("EVENT_LOOP=uvloop, but uvloop is not installed (pip install uvloop)") from exc
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T], choice: EventLoopChoice = "auto") -> T:
    """``asyncio.run`` on the chosen loop."""
    try:
        factory = loop_factory(choice)
    except ConfigError:
        main.close()  # never awaited: say nothing about it
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def settle_heap() -> None:
    """Call once start-up has built what the process keeps: it stays out of every later collection."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    log.debug("heap settled: %d objects frozen", gc.get_freeze_count())
