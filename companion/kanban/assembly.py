"""The kanban built from the settings, on the bot's engine (its kanban port, ``MemoryEngine.kanban``, is the
kanban's only way to the database): ``open_kanban`` returns None when the operator did not configure it
(``Settings.dida_enabled``). ``Kanban.start`` runs the background loop and, with ``DIDA_CALLBACK_PORT``, the
OAuth callback server; ``stop`` ends both and closes the HTTP session."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from companion.config.settings import Settings
from companion.core.errors import DidaLinkError
from companion.core.timeutil import utcnow
from companion.kanban.card_records import TokenBox
from companion.kanban.dida_api import DidaClient
from companion.kanban.oauth import CallbackServer
from companion.kanban.service import KanbanService, KanbanWorker, LinkConfig
from companion.kanban.sync import DidaConfig, Forget, KanbanSync
from memory import MemoryEngine

log = logging.getLogger(__name__)


class Kanban:
    def __init__(self, service: KanbanService, worker: KanbanWorker, client: DidaClient,
                 callback: CallbackServer | None) -> None:
        self.service, self._worker, self._client, self._callback = service, worker, client, callback
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._callback is not None:
            await self._callback.start()
        self._task = asyncio.create_task(self._worker.run(), name="dida-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._callback is not None:
            await self._callback.stop()
        await self._client.close()


def open_kanban(settings: Settings, engine: MemoryEngine, forget: Forget, *,
                clock: Callable[[], datetime] = utcnow) -> Kanban | None:
    if not settings.dida_enabled:
        return None
    assert settings.dida_client_secret is not None
    key = settings.dida_token_key.get_secret_value() if settings.dida_token_key is not None else ""
    try:
        tokens = TokenBox(key)
    except DidaLinkError as exc:
        log.warning("dida: %s; linking is refused until it is fixed", exc)
        tokens = TokenBox(None)
    if not tokens.ready:
        log.warning("dida: DIDA_TOKEN_KEY is not set; users cannot link their kanban until it is")
    client = DidaClient(settings.dida_api_base, settings.dida_auth_base)
    config = DidaConfig(settings.dida_client_id, settings.dida_client_secret.get_secret_value(),
                        settings.dida_redirect_uri, settings.tz, reminder_hour=settings.review_hours[0],
                        tier_tags=settings.dida_tier_tags, absent_after=timedelta(minutes=settings.dida_poll_minutes))
    port = engine.kanban  # its rows, and the journal as its outbox
    sync = KanbanSync(client, port, engine, port, tokens, config, forget)
    link = LinkConfig(settings.dida_auth_base, settings.dida_client_id, settings.dida_redirect_uri,
                      settings.dida_callback_port is not None, settings.tz)
    service = KanbanService(sync, link, clock=clock, tokens_ready=tokens.ready)
    # A change is pushed within a tick; a poll interval shorter than two ticks (a test's) shortens the tick.
    tick = min(15.0, settings.dida_poll_minutes * 30)
    worker = KanbanWorker(service, port, port, timedelta(minutes=settings.dida_poll_minutes), tick=tick,
                          clock=clock)
    callback = None
    if settings.dida_callback_port is not None:
        # On the bot's listening address (WEBHOOK_LISTEN, 127.0.0.1 unless told): the reverse proxy in front
        # of it forwards the redirect URI, as it does the webhook.
        callback = CallbackServer(settings.dida_callback_port, urlsplit(settings.dida_redirect_uri).path,
                                  service.finish_callback, host=settings.webhook_listen)
    return Kanban(service, worker, client, callback)
