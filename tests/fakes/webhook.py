"""Telegram's side of a webhook, for the fake Bot API: once ``setWebhook`` names a URL, pending updates are
POSTed there one at a time, in order, with the secret token header, and retried until the bot answers 2xx
(as Telegram does with ``max_connections=1``). An update is gone once delivered, as once confirmed by polling."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import aiohttp

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
RETRY_SECONDS = 0.2


class WebhookDelivery:
    def __init__(self, pending: Callable[[], list[dict[str, Any]]], delivered: Callable[[int], None],
                 changed: Callable[[], asyncio.Event]) -> None:
        self._pending, self._delivered, self._changed = pending, delivered, changed
        self.url = ""
        self.secret = ""
        self.allowed_updates: list[str] | None = None
        self.last_error = ""
        self.attempts = 0  # POSTs made, refused ones included
        self._task: asyncio.Task[None] | None = None

    def set(self, url: str, secret: str, allowed_updates: list[str] | None) -> None:
        self.url, self.secret, self.allowed_updates = url, secret, allowed_updates
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._deliver(), name="fake-telegram-webhook")

    async def delete(self) -> None:
        self.url = ""
        await self.stop()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"url": self.url, "has_custom_certificate": False,
                                "pending_update_count": len(self._pending())}
        if self.last_error:
            info["last_error_message"] = self.last_error
        return info

    async def _deliver(self) -> None:
        async with aiohttp.ClientSession() as session:
            while self.url:
                changed = self._changed()
                updates = self._pending()
                if not updates:
                    await changed.wait()
                    continue
                update = updates[0]
                if await self._post(session, update):
                    self._delivered(int(update["update_id"]))
                else:
                    await asyncio.sleep(RETRY_SECONDS)

    async def _post(self, session: aiohttp.ClientSession, update: dict[str, Any]) -> bool:
        self.attempts += 1
        headers = {SECRET_HEADER: self.secret} if self.secret else {}
        try:
            async with session.post(self.url, json=update, headers=headers,
                                    timeout=aiohttp.ClientTimeout(total=10)) as response:
                await response.read()
                if 200 <= response.status < 300:
                    self.last_error = ""
                    return True
                self.last_error = f"Wrong response from the webhook: {response.status} {response.reason}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.last_error = f"Connection failed: {type(exc).__name__}"
        return False
