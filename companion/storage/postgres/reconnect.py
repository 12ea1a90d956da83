"""Surviving a lost connection: the server restarted, or an operator ended the backend
(``pg_terminate_backend``). A store call whose connection is lost runs again on a fresh connection until
the server answers or ``RECONNECT_SECONDS`` have passed, so a turn in progress completes instead of
failing.

Running a call again is safe because a lost connection rolls its transaction back, with one exception:
a connection lost during the COMMIT, where the server may or may not have committed. ``Pool._tx`` settles
that case with the transaction's id (``txid_status``) before anything runs again, so a committed change is
never applied twice. A single statement outside a transaction (``Pool._fetch``) runs again as it is; those
statements are reads, upserts and deletes, and at worst an access counter or a usage row counts one more.

The retry is at the outermost store call: a store method calling another one (or ``_fetch``) retries once,
as a whole, not at every level.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import asyncpg

from companion.core.errors import StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a call keeps trying: longer than a server restart takes, shorter than a user waits for an answer.
RECONNECT_SECONDS = 20.0
FIRST_DELAY = 0.05
MAX_DELAY = 2.0

# asyncpg reports a connection lost mid-operation in several ways: the server's own message (shutdown,
# terminated), the socket closing, or its protocol's state errors once the connection is gone.
_LOST = (asyncpg.PostgresConnectionError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
         asyncpg.CannotConnectNowError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError)

_retrying: ContextVar[bool] = ContextVar("postgres_retrying", default=False)


class ConnectionLostError(StorageError):
    """The connection to PostgreSQL was lost before the work was done; nothing of it was committed."""


class CommitUnknownError(StorageError):
    """The connection was lost during a COMMIT and the server could not say whether it committed."""


def is_lost(exc: BaseException) -> bool:
    return isinstance(exc, _LOST)


async def reconnecting(call: Callable[[], Awaitable[T]]) -> T:
    """``call()``, run again after a ``ConnectionLostError`` until ``RECONNECT_SECONDS`` have passed."""
    if _retrying.get():
        return await call()  # an outer store call retries as a whole
    token = _retrying.set(True)
    try:
        loop = asyncio.get_running_loop()
        give_up: float | None = None
        delay = FIRST_DELAY
        while True:
            try:
                return await call()
            except ConnectionLostError as exc:
                # Counted from the first loss, not the call's start: a first attempt that waited long (for a
                # lock, or for the server to settle a lost COMMIT) must not leave no time to try again.
                give_up = loop.time() + RECONNECT_SECONDS if give_up is None else give_up
                if loop.time() + delay > give_up:
                    raise
                log.warning("PostgreSQL connection lost (%s); trying again in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY)
    finally:
        _retrying.reset(token)


def reconnecting_method(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        return await reconnecting(lambda: method(*args, **kwargs))

    return wrapper


def wrap_public_methods(cls: type) -> None:
    """Every public coroutine method ``cls`` itself defines retries on a lost connection (async generators,
    which cannot run again from their start once they yielded, retry per statement inside)."""
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(value):
            setattr(cls, name, reconnecting_method(value))
