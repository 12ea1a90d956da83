"""OAuth's way back: one-time ``state`` values bound to the user who asked (10 minutes), and the bot's own
small callback server (aiohttp) at the redirect URI's path, for operators who run a public endpoint."""

from __future__ import annotations

import html
import logging
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from aiohttp import web

log = logging.getLogger(__name__)

STATE_LIFETIME = timedelta(minutes=10)


class OAuthStates:
    """Kept in the process: a restart only means asking for a new link."""

    def __init__(self) -> None:
        self._states: dict[str, tuple[int, datetime]] = {}

    def issue(self, user_id: int, now: datetime) -> str:
        self._drop(lambda user, at: user == user_id or now - at > STATE_LIFETIME)
        state = secrets.token_urlsafe(24)
        self._states[state] = (user_id, now)
        return state

    def take(self, state: str, now: datetime) -> int | None:
        """The user the state was issued to, once, within its lifetime."""
        found = self._states.pop(state, None)
        return None if found is None or now - found[1] > STATE_LIFETIME else found[0]

    def take_user(self, user_id: int, now: datetime) -> bool:
        """Use up the user's pending state (``/dida_code``): whether there was a live one."""
        live = [s for s, (user, at) in self._states.items() if user == user_id and now - at <= STATE_LIFETIME]
        self._drop(lambda user, at: user == user_id)
        return bool(live)

    def _drop(self, gone: Callable[[int, datetime], bool]) -> None:
        for state in [s for s, (user, at) in self._states.items() if gone(user, at)]:
            del self._states[state]


Finish = Callable[[str, str], Awaitable[str]]  # (state, code) -> the page's text


class CallbackServer:
    """``GET {path}?code=…&state=…``: hands the pair to ``finish`` and shows its answer as a small page."""

    def __init__(self, port: int, path: str, finish: Finish, host: str = "127.0.0.1") -> None:
        self._port, self._path, self._finish, self._host = port, path or "/", finish, host
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get(self._path, self._callback)
        self._runner = web.AppRunner(app, access_log=None)  # the query holds a code: no access log
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()
        log.info("dida: OAuth callback listening on port %d", self._port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _callback(self, request: web.Request) -> web.Response:
        text = await self._finish(request.query.get("state", ""), request.query.get("code", ""))
        page = f"<!doctype html><meta charset='utf-8'><title>小伴</title><p>{html.escape(text)}</p>"
        return web.Response(text=page, content_type="text/html")
