"""The Telegram client's session: requests as JSON bodies."""

from __future__ import annotations

from typing import Any, cast

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.exceptions import TelegramNetworkError
from aiogram.methods import TelegramMethod
from aiogram.methods.base import TelegramType
from aiogram.types import InputFile
from aiohttp import ClientError, ClientTimeout

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
