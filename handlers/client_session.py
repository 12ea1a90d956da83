"""The Telegram client's session: requests as JSON bodies, and polling in batches under load."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import ClientDecodeError, TelegramAPIError, TelegramNetworkError
from aiogram.methods import GetUpdates, Response, TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import InputFile, Update
from aiohttp import ClientError, ClientTimeout
from pydantic import ValidationError

JSON_HEADERS = {"Content-Type": "application/json"}
# How long a poll that follows one which brought updates waits, so that what arrives meanwhile comes in one
# answer: a bot answering hundreds of messages a second otherwise polls once per message (docs/benchmarks-history.md
# section 20). A message arriving during the pause waits at most this long, beside a reply's seconds.
POLL_PACE_SECONDS = 0.02
CONFIRM_SECONDS = 5.0  # at most this long for the offset sent again at a stop

log = logging.getLogger(__name__)


class JsonSession(AiohttpSession):
    """aiogram's aiohttp session sending each request as one JSON body, which the Bot API takes as it takes
    a form: aiohttp's form encoding of every field was a third of a call's CPU. A request with a file to
    upload goes as aiogram sends it, a multipart form."""

    async def make_request(
        self, bot: Bot, method: TelegramMethod[TelegramType], timeout: int | None = None
    ) -> TelegramType:
        files: dict[str, InputFile] = {}
        # What a form would leave out (None, "") is left out here too. aiogram prepares a dict's items as
        # objects and dumps the dict once: the body is one JSON document, not fields each holding JSON text.
        fields = {key: value for key, value in method.model_dump(warnings=False).items()
                  if value is not None and value != ""}
        body: str = self.prepare_value(fields, bot=bot, files=files)
        if files:
            return await super().make_request(bot, method, timeout)
        session = await self.create_session()
        url = self.api.api_url(token=bot.token, method=method.__api_method__)
        try:
            async with session.post(url, data=body, headers=JSON_HEADERS,
                                    timeout=ClientTimeout(total=self.timeout if timeout is None else timeout)) as resp:
                raw_result = await resp.text()
        except TimeoutError as e:
            raise TelegramNetworkError(method=method, message="Request timeout error") from e
        except ClientError as e:
            raise TelegramNetworkError(method=method, message=f"{type(e).__name__}: {e}") from e
        try:
            response = self.check_response(bot=bot, method=method, status_code=resp.status, content=raw_result)
        except ClientDecodeError:
            if not isinstance(method, GetUpdates):
                raise
            return cast(TelegramType, readable_updates(bot, raw_result))
        return cast(TelegramType, response.result)


def readable_updates(bot: Bot, raw: str) -> list[Update]:
    """A poll's updates when one of them cannot be read (a field this aiogram does not know the shape of):
    each unreadable one becomes an update with its id alone, which the dispatcher passes over as of no known
    type, so polling confirms it and goes on; otherwise the poll would fail and bring it back for ever, and
    every later update would wait behind it. When even that cannot be done (no JSON, no update ids), the
    decoding error stands and aiogram polls again after its back-off."""
    try:
        body = json.loads(raw)
        items = body["result"]
        ids = [int(item["update_id"]) for item in items]
    except (ValueError, TypeError, KeyError) as exc:
        raise ClientDecodeError("a poll's answer is not a list of updates", exc, raw) from None
    updates: list[Update] = []
    for item, update_id in zip(items, ids, strict=True):
        try:
            updates.append(Update.model_validate(item, context={"bot": bot}))
        except ValidationError as exc:
            log.warning("update %d could not be read and is skipped (%d errors, first at %s)", update_id,
                        exc.error_count(), ".".join(map(str, exc.errors()[0]["loc"])) if exc.errors() else "?")
            updates.append(Update.model_validate({"update_id": update_id}, context={"bot": bot}))
    return updates


class PacedPolling(BaseRequestMiddleware):
    """A session middleware: a ``getUpdates`` that follows one which brought updates waits ``pace`` seconds.

    Telegram answers a long poll as soon as one update is there, so under load each poll brought one update:
    a request and its answer per message. Telegram confirms updates only with the next ``getUpdates``'s
    offset; a stop during the pause therefore still sends that offset (one short request, its answer left
    unconfirmed for the next start), or the batch just handled would be handled again after a restart; so does
    a stop while a poll is out, whose request may not have been written yet."""

    def __init__(self, pace: float = POLL_PACE_SECONDS,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.pace = pace
        self._sleep = sleep
        self._busy = False  # the last poll brought updates

    async def __call__(
        self, make_request: NextRequestMiddlewareType[TelegramType], bot: Bot, method: TelegramMethod[TelegramType]
    ) -> Response[TelegramType]:
        request = method
        if not isinstance(method, GetUpdates):
            return await make_request(bot, request)
        try:
            if self._busy and self.pace > 0:
                await self._sleep(self.pace)
            answer = await make_request(bot, request)
        except asyncio.CancelledError:
            # Stopped in the pause, or with this poll out: its offset may never have reached Telegram (the pause,
            # a connection still being made), so it is sent once more, briefly, before the stop goes on.
            await asyncio.shield(self._confirm(make_request, bot, method))
            raise
        self._busy = bool(getattr(answer, "result", answer))
        return answer

    async def _confirm(
        self, make_request: NextRequestMiddlewareType[TelegramType], bot: Bot, method: GetUpdates,
    ) -> None:
        if method.offset is None:
            return
        confirming = GetUpdates(offset=method.offset, limit=1, timeout=0, allowed_updates=method.allowed_updates)
        try:
            await asyncio.wait_for(make_request(bot, cast(TelegramMethod[TelegramType], confirming)),
                                   CONFIRM_SECONDS)
        except (TelegramAPIError, TimeoutError) as exc:  # what was handled comes again at the next start
            log.warning("could not confirm the last updates at stop (they will be handled again): %s",
                        type(exc).__name__)
