"""How updates reach the bot: long polling (the default), or Telegram's webhook (``WEBHOOK_URL``).

In webhook mode the bot serves aiogram's aiohttp handler on ``WEBHOOK_LISTEN:WEBHOOK_PORT`` behind the
operator's TLS proxy. Every request must carry the secret token Telegram was given (``X-Telegram-Bot-Api-
Secret-Token``); one without it is refused with 401 before anything is read. Updates are answered at once
and handled in the background, as polling handles them, so the per-user order and the message buffer work
the same in both modes. A client too slow with its headers or body is cut off (``handlers.serving``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from urllib.parse import urlsplit

from aiogram import Bot, Dispatcher
from aiogram.webhook.aiohttp_server import SimpleRequestHandler, setup_application
from aiohttp import web

from companion.config.settings import Settings
from handlers.serving import guarded_runner

log = logging.getLogger(__name__)

Routes = Callable[[web.Application], None]


async def receive(
    dispatcher: Dispatcher, bot: Bot, settings: Settings, *, queued_for: Dispatcher | None = None,
    routes: Routes | None = None,
) -> None:
    """Take updates until the process is told to stop (SIGTERM or Ctrl-C), by webhook or by polling.

    With ``queued_for``, ``dispatcher`` only queues updates (``handlers.queue.intake``) for the workers'
    dispatcher: Telegram is asked for the update types that one handles, and each update is queued before
    Telegram learns it arrived (the webhook answers after it, polling confirms it with the next request).
    ``routes``: more of the bot's pages (the memory board), served by the webhook's server."""
    handling = queued_for or dispatcher
    allowed = handling.resolve_used_update_types()
    if settings.webhook_url:
        await serve_webhook(dispatcher, bot, settings, stop_signal(), allowed, background=queued_for is None,
                            routes=routes)
        return
    # A webhook left by an earlier run in webhook mode would refuse every getUpdates (409 Conflict);
    # removing it keeps the updates Telegram holds, which polling then takes.
    await bot.delete_webhook(drop_pending_updates=False)
    log.info("bot started; polling %s", settings.telegram_api_base)
    await dispatcher.start_polling(bot, close_bot_session=False, allowed_updates=allowed,
                                   handle_as_tasks=queued_for is None)


def stop_signal() -> asyncio.Event:
    """Set on SIGTERM or SIGINT (aiogram's polling installs the same; a webhook server does not)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return stop


async def serve_webhook(dispatcher: Dispatcher, bot: Bot, settings: Settings, stop: asyncio.Event,
                        allowed: list[str], *, background: bool = True, routes: Routes | None = None) -> None:
    """Serve the webhook until ``stop`` is set, then stop taking requests. The webhook stays registered with
    Telegram, which keeps new updates until this bot (or another process of it) answers again. Without
    ``background`` each request is answered once ``dispatcher`` is done with its update."""
    app = web.Application()
    handler = SimpleRequestHandler(dispatcher, bot, handle_in_background=background,
                                   secret_token=settings.webhook_token())
    app.router.add_route("POST", settings.webhook_path, handler.handle)  # not ``register``: it closes the bot's session
    if routes is not None:
        routes(app)
    setup_application(app, dispatcher, bot=bot)
    runner = guarded_runner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, settings.webhook_listen, settings.webhook_port).start()
        await bot.set_webhook(
            settings.webhook_url, secret_token=settings.webhook_token(), drop_pending_updates=False,
            allowed_updates=allowed,
        )
        log.info("bot started; webhook at %s (listening on %s:%d)", _shown(settings.webhook_url),
                 settings.webhook_listen, settings.webhook_port)
        await stop.wait()
    finally:
        await runner.cleanup()
        log.info("webhook server stopped")


def _shown(url: str) -> str:
    """The URL without a query string, where an operator might have put something secret."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"
