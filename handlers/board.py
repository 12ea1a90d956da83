"""The memory board, a Telegram Mini App: ``/board`` opens it, and the bot serves its page and JSON API.

Who is asking is only ever what Telegram signed: every API request carries the Mini App's init data
(``Authorization: tma <init data>``), checked with the bot token's HMAC as Telegram documents (aiogram's
``safe_parse_webapp_init_data``) and no older than ``FRESH``. The scope a request reads or changes is the
signed user's own (their private chat, or their scope of a group they have memories in); a handle is checked
against it by the engine. Refusals are 401 (unsigned, forged, expired) and 403 (another scope's memory, a
group that is not theirs), and change nothing. Each user has a request budget (``RATE``). No memory text is
logged. In webhook mode the routes join the webhook's server; when polling, the board has its own on
``WEBHOOK_LISTEN:WEBAPP_PORT``. Both sit behind the operator's TLS proxy at ``WEBAPP_URL``.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import CommandObject, CommandStart
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup, Message, WebAppInfo
from aiogram.utils.web_app import safe_parse_webapp_init_data
from aiohttp import web

from companion.chat import board_cards as board
from companion.chat import texts
from companion.chat.command_table import BOARD, Place, offer
from companion.chat.group import Rooms
from companion.chat.pipeline import ChatService
from companion.config.settings import Settings
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError, StorageError
from companion.core.models import Scope
from companion.core.timeutil import utcnow
from handlers.commands import command, commands_router
from handlers.filters import IN_PRIVATE
from handlers.forgetting import forget_here
from handlers.serving import guarded_runner

log = logging.getLogger(__name__)

FRESH = timedelta(hours=24)  # init data older than this is refused: a leaked one does not work for ever
AHEAD = timedelta(minutes=5)  # a clock a little ahead of ours
RATE = (120, 60.0)  # requests per user per window (seconds): the page polls every few seconds
PRUNE_EVERY = 512  # requests between two sweeps of the users whose window is empty
PAGE_FILES = {"": ("index.html", "text/html"), "board.css": ("board.css", "text/css"),
              "board.js": ("board.js", "application/javascript")}
# The page runs its own script and Telegram's, talks to its own API and nothing else: a memory's words that
# looked like markup could not run even if the script ever put them in as HTML (it never does).
PAGE_POLICY = ("default-src 'none'; script-src 'self' https://telegram.org; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; base-uri 'none'; form-action 'none'")
OPEN_BOARD = "📋 打开记忆面板"
GROUP_HINT = "记忆面板在私聊里打开：点下面的按钮到私聊，发 /board，面板上可以切换到这个群里关于你的记忆。"
NO_BOARD = "这个机器人没有开启记忆面板。"
EDITED = "已在记忆面板上改好：{text}"
GROUP_START = "board_"  # /start board_<chat id>: the deep link a group's /board sends to the private chat

Notify = Callable[[int, str], Awaitable[None]]


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def signed_user(token: str, init_data: str, now: datetime) -> int:
    """The user id in ``init_data`` when Telegram signed it for this bot within ``FRESH``; else ``Refused``
    (401). Nothing else in a request names the user."""
    if not init_data:
        raise Refused(401, "unsigned")
    try:
        data = safe_parse_webapp_init_data(token, init_data)
    except ValueError:  # a bad signature, or fields that do not parse
        raise Refused(401, "forged") from None
    signed_at = data.auth_date if data.auth_date.tzinfo else data.auth_date.replace(tzinfo=UTC)
    if now - signed_at > FRESH or signed_at - now > AHEAD:
        raise Refused(401, "expired")
    if data.user is None:
        raise Refused(401, "no user")
    return int(data.user.id)


class Budget:
    """At most ``RATE[0]`` requests a user per ``RATE[1]`` seconds (a sliding window), in this process."""

    def __init__(self, limit: int = RATE[0], window: float = RATE[1], clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._limit, self._window, self._clock = limit, window, clock
        self._seen: defaultdict[int, deque[float]] = defaultdict(deque)
        self._takes = 0

    @property
    def tracked(self) -> int:
        """Users with requests remembered (the rest were swept)."""
        return len(self._seen)

    def take(self, user_id: int) -> bool:
        now = self._clock()
        self._takes += 1
        if self._takes % PRUNE_EVERY == 0:  # users gone quiet leave nothing behind
            for user, times in list(self._seen.items()):
                if not times or now - times[-1] > self._window:
                    del self._seen[user]
        seen = self._seen[user_id]
        while seen and now - seen[0] > self._window:
            seen.popleft()
        if len(seen) >= self._limit:
            return False
        seen.append(now)
        return True


class Board:
    """The page and its API, on the chat's engine; ``notify`` sends a receipt to the user's private chat."""

    def __init__(self, settings: Settings, token: str, chat: ChatService, rooms: Rooms, notify: Notify, *,
                 clock: Callable[[], datetime] = utcnow, budget: Budget | None = None) -> None:
        self.path = settings.webapp_path
        self.url = settings.webapp_url
        self._token = token
        self._tz = settings.tz
        self._chat, self._rooms, self._notify, self._clock = chat, rooms, notify, clock
        self._budget = budget or Budget()
        folder = resources.files("handlers") / "webapp"
        self._files = {name: (folder.joinpath(file).read_bytes(), kind) for name, (file, kind) in PAGE_FILES.items()}

    def install(self, app: web.Application) -> None:
        app.router.add_get(self.path, self._redirect)
        for name in PAGE_FILES:
            app.router.add_get(f"{self.path}/{name}", self._page)
        app.router.add_get(f"{self.path}/api/board", self._api(self._read))
        app.router.add_post(f"{self.path}/api/change", self._api(self._change))
        app.router.add_post(f"{self.path}/api/forget", self._api(self._forget))

    async def listen(self, host: str, port: int) -> web.AppRunner:
        """The board's own server (polling mode: there is no webhook server to join)."""
        app = web.Application(client_max_size=64 * 1024)
        self.install(app)
        runner = guarded_runner(app)
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        log.info("memory board served on %s:%d at %s", host, port, self.path)
        return runner

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{self.path}/" + (f"?{request.query_string}" if request.query_string else ""))

    async def _page(self, request: web.Request) -> web.StreamResponse:
        body, kind = self._files[request.path.removeprefix(f"{self.path}/")]
        response = web.Response(body=body, content_type=kind, charset="utf-8",
                                headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
                                         "Content-Security-Policy": PAGE_POLICY, "Referrer-Policy": "no-referrer"})
        response.enable_compression()
        return response

    def _api(self, work: Callable[[web.Request, int], Awaitable[dict[str, Any]]]
             ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            try:
                scheme, _, init_data = request.headers.get("Authorization", "").partition(" ")
                user = signed_user(self._token, init_data if scheme.lower() == "tma" else "", self._clock())
                if not self._budget.take(user):
                    raise Refused(429, "too many requests")
                answer = await work(request, user)
            except Refused as refused:
                log.info("board request refused: %s (%d)", refused, refused.status)
                return web.json_response({"error": str(refused)}, status=refused.status)
            except (NotYourMemoryError, MemoryNotFoundError):
                return web.json_response({"error": "not yours"}, status=403)
            except board.BoardError as bad:
                return web.json_response({"error": str(bad)}, status=400)
            except StorageError as exc:
                log.warning("board request failed: %s", exc)
                return web.json_response({"error": "memory unavailable"}, status=503)
            response = web.json_response(answer, dumps=_dumps, headers={"Cache-Control": "no-store"})
            response.enable_compression()
            return response

        return handle

    async def _scope(self, user: int, chosen: object, owned: list[Scope] | None = None) -> Scope:
        """The caller's scope the request chose: their private chat, or a group they have memories in
        (``owned``: the user's scopes when the caller has read them already)."""
        if chosen in (None, "", "private"):
            return Scope(user)
        try:
            wanted = Scope(user, int(str(chosen)))
        except ValueError:  # not a number, or no chat id (InvalidScopeError)
            raise Refused(400, "bad scope") from None
        if wanted not in (owned if owned is not None else await self._chat.engine.scopes_of(user)):
            raise Refused(403, "not your scope")
        return wanted

    async def _read(self, request: web.Request, user: int) -> dict[str, Any]:
        engine = self._chat.engine
        chosen = request.query.get("scope")
        # A group's board checks its scope against the user's scopes, which its answer lists too: read once.
        owned = None if chosen in (None, "", "private") else await engine.scopes_of(user)
        scope = await self._scope(user, chosen, owned)
        query = request.query.get("q", "").strip()[:40]
        version = request.query.get("since")
        if version is not None and not query and version == str(await engine.version(scope)):
            return {"unchanged": True}
        found = await board.board(engine, scope, self._clock(), self._tz, query)
        choices = board.scope_choices(owned if owned is not None else await engine.scopes_of(user), user)
        return {**found, "scope": "private" if scope.chat_id is None else str(scope.chat_id),
                "scopes": [{"key": c.key(), "name": c.name} for c in choices]}

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise Refused(400, "not JSON") from None
        handle = body.get("id") if isinstance(body, dict) else None
        if not isinstance(handle, int) or isinstance(handle, bool) or not 0 < handle < 2**63:
            raise Refused(400, "no memory id")
        return dict(body)

    async def _change(self, request: web.Request, user: int) -> dict[str, Any]:
        body = await self._body(request)
        scope = await self._scope(user, body.get("scope"))
        action = str(body.get("action", ""))
        memory = await board.change(self._chat.engine, scope, body["id"], action, self._clock(), body.get("value"))
        if action == "edit":
            await self._notify(user, EDITED.format(text=memory.shown))
        return {"ok": True, "version": await self._chat.engine.version(scope)}

    async def _forget(self, request: web.Request, user: int) -> dict[str, Any]:
        body = await self._body(request)
        scope = await self._scope(user, body.get("scope"))
        memory = await self._chat.engine.get(scope, body["id"])  # owner-checked before anything changes
        count = await forget_here(self._chat, scope, [memory])
        await self._notify(user, texts.forgotten(count))
        return {"ok": True, "version": await self._chat.engine.version(scope)}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def notifier(bot: Bot) -> Notify:
    """Receipts to the user's private chat; a user who blocked the bot still has their board."""

    async def notify(user_id: int, text: str) -> None:
        try:
            await bot.send_message(user_id, text)
        except TelegramAPIError as exc:
            log.info("board receipt to %s not delivered: %s", user_id, type(exc).__name__)

    return notify


async def start_board(settings: Settings, bot: Bot, chat: ChatService, rooms: Rooms) -> Board | None:
    """The board when ``WEBAPP_URL`` is set, else None. Its routes join the webhook's server (``install``),
    or it listens on its own (``listen``) when the bot polls."""
    if not settings.webapp_url:
        return None
    offer(BOARD)  # /board in the menus and help from now on
    return Board(settings, bot.token, chat, rooms, notifier(bot))


def with_board_button(markup: InlineKeyboardMarkup | None, url: str, scope: Scope) -> InlineKeyboardMarkup | None:
    """``/memories``' buttons and, in a private chat with the board on, one more row that opens it."""
    if not url or scope.chat_id is not None:
        return markup
    rows = [*(markup.inline_keyboard if markup is not None else []), *board_button(url, scope).inline_keyboard]
    return InlineKeyboardMarkup(inline_keyboard=rows)


def board_button(url: str, scope: Scope) -> InlineKeyboardMarkup:
    """The button that opens the board (Telegram opens a Mini App from a private chat's button only)."""
    opened = url if scope.chat_id is None else f"{url}?scope={scope.chat_id}"
    return InlineKeyboardMarkup(inline_keyboard=[[InlineKeyboardButton(text=OPEN_BOARD,
                                                                       web_app=WebAppInfo(url=opened))]])


async def open_board(message: Message, bot: Bot, board_url: str = "") -> None:
    if message.from_user is None:
        return
    if not board_url:
        await message.answer(NO_BOARD)
        return
    if message.chat.type == "private":
        await message.answer("你的记忆面板：", reply_markup=board_button(board_url, Scope(message.from_user.id)))
        return
    # Telegram opens a Mini App from a private chat's button only: a link to the private chat whose start
    # parameter names this group, answered there with the button for the user's own scope of it.
    me = await bot.me()
    link = InlineKeyboardMarkup(inline_keyboard=[[InlineKeyboardButton(
        text="去私聊打开", url=f"https://t.me/{me.username}?start={GROUP_START}{message.chat.id}")]])
    await message.reply(GROUP_HINT, reply_markup=link)


async def open_group_board(message: Message, command: CommandObject, board_url: str = "") -> None:
    """``/start board_<chat id>`` in a private chat, from a group's ``/board``: the board of the user's own
    memories of that group (the page refuses a group they have none in)."""
    if message.from_user is None:
        return
    if not board_url:
        await message.answer(NO_BOARD)
        return
    chat_id = int((command.args or "").removeprefix(GROUP_START))
    await message.answer("你在这个群里的记忆面板：",
                         reply_markup=board_button(board_url, Scope(message.from_user.id, chat_id)))


def build() -> Router:
    """Before the groups' and the private commands' routers: ``/board`` in a group, and the deep link's
    ``/start``, are the board's."""
    router = commands_router("board")
    router.message.register(open_group_board, IN_PRIVATE,
                            CommandStart(deep_link=True, magic=F.args.regexp(rf"^{GROUP_START}-\d+$")))
    router.message.register(open_board, command((Place.PRIVATE, Place.GROUP), "board"))
    return router
