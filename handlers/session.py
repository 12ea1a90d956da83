"""The Telegram client's session: requests as JSON bodies, and getUpdates paced into batches under load."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import TelegramNetworkError
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import InputFile
from aiohttp import ClientError, ClientTimeout

# After a getUpdates that brought updates, the next one starts no sooner than this after it: a busy bot then
# takes its updates in batches instead of one or two a call (each call and its answer cost about as much CPU
# as a reply's sendMessage). Against Telegram's servers the round trip alone spaces the calls more than
# this; against a Bot API server on the same machine it did not (BENCHMARKS.md section 19). An empty answer
# (the long poll ran out) is followed at once, so a quiet bot waits for nothing.
POLL_PAUSE_SECONDS = 0.02

JSON_HEADERS = {"Content-Type": "application/json"}


class JsonSession(AiohttpSession):
    """aiogram's aiohttp session sending each request as one JSON body, which the Bot API takes as it takes
    a form: aiohttp's form encoding of every field was a third of a call's CPU. A request with a file to
    upload goes as aiogram sends it, a multipart form."""

    async def make_request(
        self, bot: Bot, method: TelegramMethod[TelegramType], timeout: int | None = None
    ) -> TelegramType:
        files: dict[str, InputFile] = {}
        fields: dict[str, Any] = {}
        for key, value in method.model_dump(warnings=False).items():
            # Nested objects stay objects (``_dumps_json=False``): the body is one JSON document, not fields
            # each holding JSON text. What a form would leave out (None, "") is left out here too.
            prepared = self.prepare_value(value, bot=bot, files=files, _dumps_json=False)
            if prepared is not None and prepared != "":
                fields[key] = prepared
        if files:
            return await super().make_request(bot, method, timeout)
        session = await self.create_session()
        url = self.api.api_url(token=bot.token, method=method.__api_method__)
        try:
            async with session.post(url, data=self.json_dumps(fields), headers=JSON_HEADERS,
                                    timeout=ClientTimeout(total=self.timeout if timeout is None else timeout)) as resp:
                raw_result = await resp.text()
        except TimeoutError as e:
            raise TelegramNetworkError(method=method, message="Request timeout error") from e
        except ClientError as e:
            raise TelegramNetworkError(method=method, message=f"{type(e).__name__}: {e}") from e
        response = self.check_response(bot=bot, method=method, status_code=resp.status, content=raw_result)
        return cast(TelegramType, response.result)


class PollPacing(BaseRequestMiddleware):
    """A session middleware holding a getUpdates that follows one with updates until ``pause`` after that one
    started (``POLL_PAUSE_SECONDS``)."""

    def __init__(self, pause: float = POLL_PAUSE_SECONDS, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.pause = pause
        self._clock = clock
        self._sleep = sleep
        self._last = 0.0
        self._busy = False

    async def __call__(
        self, make_request: NextRequestMiddlewareType[TelegramType], bot: Bot, method: TelegramMethod[TelegramType]
    ) -> Response[TelegramType]:
        polling = isinstance(method, GetUpdates)
        if not polling:
            return await make_request(bot, method)
        if self._busy:
            wait = self._last + self.pause - self._clock()
            if wait > 0:
                await self._sleep(wait)
        self._last = self._clock()
        updates = await make_request(bot, method)
        self._busy = bool(updates)
        return updates
