"""The bot's own HTTP server (the webhook, the memory board): aiohttp with limits against slow clients.

A client that opens a connection and sends its headers a byte a minute (or a body that never ends) would
otherwise hold a socket for an hour, aiohttp's default keep-alive; enough of them and the bot takes no more
updates. aiohttp closes a connection whose request has not fully arrived when its keep-alive timer ends, so
that timer is the header deadline; a middleware gives the body its own."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

log = logging.getLogger(__name__)

HEADER_SECONDS = 15.0  # to send a request's headers, and the longest a kept-alive connection idles
BODY_SECONDS = 15.0  # to send its body once the headers are in


def body_deadline(seconds: float) -> Middleware:
    """A middleware reading each request's body within ``seconds`` (answered 408 otherwise), before any
    handler runs; handlers then read the kept copy."""

    @web.middleware
    async def read_in_time(request: web.Request,
                           handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if request.body_exists:
            try:
                await asyncio.wait_for(request.read(), seconds)
            except TimeoutError:
                log.warning("HTTP request to %s refused: its body took over %.0f s", request.path, seconds)
                refused = web.Response(status=408, text="request body too slow")
                refused.force_close()  # the rest of the body would still be on its way
                return refused
        return await handler(request)

    return read_in_time


def guarded_runner(app: web.Application, *, header_seconds: float = HEADER_SECONDS,
                   body_seconds: float = BODY_SECONDS) -> web.AppRunner:
    """A runner for ``app`` whose connections must deliver headers within ``header_seconds`` and a body within
    ``body_seconds``. No access log: a query may hold a secret, a path a user's id."""
    app.middlewares.insert(0, body_deadline(body_seconds))
    # lingering_time: after a refusal aiohttp reads what is left of the body before closing; a second at most.
    return web.AppRunner(app, access_log=None, keepalive_timeout=header_seconds, lingering_time=1.0)
