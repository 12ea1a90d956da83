"""A local Telegram Bot API so aiogram's real client can be exercised without the internet.

Only the methods the bot uses exist, but they mimic Telegram's observable behaviour (status codes,
error descriptions, the UTF-16 length limit, long polling and offsets) so bugs are not papered over.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .base import FakeServer
from .webhook import WebhookDelivery

JSONDict = dict[str, Any]

MAX_MESSAGE_LENGTH = 4096
MAX_UPDATES_LIMIT = 100
# Free text must never be JSON-decoded, even when a user literally types "[1]" or "true".
_FREE_TEXT = frozenset({"text", "caption", "description", "short_description", "title", "name", "query"})
_INT_FIELDS = frozenset({"chat_id", "from_chat_id", "message_id", "user_id", "offset", "limit"})
_INT_RE = re.compile(r"-?\d+")
_COMMAND_RE = re.compile(r"[a-z0-9_]{1,32}")
_CHAT_ACTIONS = frozenset(
    {
        "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
        "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
    }
)  # fmt: skip
_NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are "
    "exactly the same as a current content and reply markup of the message"
)


MAX_CAPTION_LENGTH = 1024
_COMMAND_SCOPES = frozenset({"default", "all_private_chats", "all_group_chats", "all_chat_administrators",
                             "chat", "chat_administrators", "chat_member"})


def _scope_key(scope: JSONDict) -> str:
    return json.dumps(scope, sort_keys=True)


def utf16_len(text: str) -> int:
    """Telegram measures text in UTF-16 code units, so an emoji outside the BMP counts as two."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2  # a lone surrogate is one unit too


class _ApiError(Exception):
    def __init__(self, status: int, description: str, parameters: JSONDict | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.parameters = status, description, parameters

    def response(self) -> web.Response:
        body: JSONDict = {"ok": False, "error_code": self.status, "description": self.description}
        if self.parameters:
            body["parameters"] = self.parameters
        return web.json_response(body, status=self.status)


@dataclass
class _Failure:
    status: int
    description: str
    retry_after: int | None


def _decode_value(key: str, value: str) -> Any:
    """Undo aiogram's form encoding: every non-string value arrives JSON-dumped in a form field."""
    if key in _INT_FIELDS and _INT_RE.fullmatch(value):
        return int(value)
    if key in _FREE_TEXT:
        return value
    if value in ("true", "false"):
        return value == "true"
    if value[:1] in ("{", "["):
        with contextlib.suppress(ValueError):
            return json.loads(value)
    return value


async def _read_params(request: web.Request) -> JSONDict:
    # Telegram accepts parameters in the query string as well as in any body encoding.
    params: JSONDict = {k: _decode_value(k, v) for k, v in request.query.items()}
    if request.content_type == "application/json" and request.can_read_body:
        body = await request.json()
        if isinstance(body, dict):
            params.update(body)
    elif request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
        for key, value in (await request.post()).items():
            if isinstance(value, str):
                params[key] = _decode_value(key, value)
            elif isinstance(value, web.FileField):  # an upload: keep what a test could assert on
                data = value.file.read()
                params[key] = {"filename": value.filename, "size": len(data), "content": data}
            else:
                params[key] = bytes(value)
    chat_id = params.get("chat_id")
    if isinstance(chat_id, str) and _INT_RE.fullmatch(chat_id):
        params["chat_id"] = int(chat_id)
    return params


class FakeTelegram(FakeServer):
    """Bot API server on 127.0.0.1; point aiogram at it with ``TelegramAPIServer.from_base(base_url)``."""

    def __init__(
        self, token: str = "123456:TEST", *, bot_first_name: str = "小伴", bot_username: str = "companion_bot"
    ) -> None:
        super().__init__()
        self.token = token
        bot_id = token.split(":", 1)[0]
        self.bot_user: JSONDict = {
            "id": int(bot_id) if bot_id.isdigit() else 123456, "is_bot": True, "first_name": bot_first_name,
            "username": bot_username, "can_join_groups": True, "can_read_all_group_messages": False,
        }  # fmt: skip
        self.calls: list[tuple[str, JSONDict]] = []
        self.body_types: list[tuple[str, str]] = []  # (method, the request's content type)
        self.commands: list[JSONDict] | None = None
        self._sent: list[JSONDict] = []
        self._actions: list[JSONDict] = []
        self._updates: list[JSONDict] = []
        self._chats: dict[int, JSONDict] = {}
        self._failures: dict[str, list[_Failure]] = {}
        # One sequence for both directions, as in a private chat where user and bot messages interleave.
        self._message_ids = itertools.count(1)
        self._update_ids = itertools.count(1)
        self._file_ids = itertools.count(1)
        self._closing = False
        # Bot API method names are case-insensitive, hence lower-case keys.
        self._methods: dict[str, Callable[[JSONDict], Awaitable[Any]]] = {
            "getme": self._get_me, "close": self._true, "logout": self._true,
            "setmycommands": self._set_my_commands, "getmycommands": self._get_my_commands,
            "deletemycommands": self._delete_my_commands, "sendchataction": self._send_chat_action,
            "sendmessage": self._send_message, "editmessagetext": self._edit_message_text,
            "getupdates": self._get_updates,
        }  # fmt: skip
        self._methods.update({
            "answercallbackquery": self._answer_callback_query,
            "editmessagereplymarkup": self._edit_message_reply_markup,
        })
        self.callback_answers: list[JSONDict] = []
        self._callback_ids = itertools.count(1)
        # Uploads (documents, photos) and per-scope command menus (BotCommandScope*).
        self._methods.update({
            "senddocument": self._send_document, "sendphoto": self._send_photo,
            "setmycommands": self._set_scoped_commands, "getmycommands": self._get_scoped_commands,
        })
        self.uploads: list[JSONDict] = []
        self.scoped_commands: dict[str, list[JSONDict]] = {}

        # Group chats: menus per BotCommandScope type, administrators per chat, who ever opened a private
        # chat (Telegram refuses to let a bot message a user first), and what users said (for replies).
        self._admins: dict[int, set[int]] = {}
        self._private_started: set[int] = set()
        self._group_members: set[int] = set()
        self._pushed: dict[tuple[int, int], JSONDict] = {}
        self._methods["getchatmember"] = self._get_chat_member
        self._methods["getchat"] = self._get_chat

        # Webhook mode: updates are POSTed to the bot instead of waiting for getUpdates.
        self.webhook = WebhookDelivery(lambda: self._updates, self._confirm, lambda: self._changed)
        self._methods.update({"setwebhook": self._set_webhook, "deletewebhook": self._delete_webhook,
                              "getwebhookinfo": self._get_webhook_info})

    def _routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/bot{token}/{method}", self._handle)

    async def start(self) -> None:
        await super().start()
        self._closing = False

    async def stop(self) -> None:
        self._closing = True  # releases long polls still held open by live clients
        self._notify()
        await self.webhook.stop()
        await super().stop()

    def fail_next(
        self, method: str, count: int = 1, status: int = 500, description: str | None = None, *,
        retry_after: int = 1,
    ) -> None:  # fmt: skip
        """Make the next ``count`` calls of ``method`` fail; a 429 carries ``parameters.retry_after``."""
        if description is None:
            description = {
                429: f"Too Many Requests: retry after {retry_after}",
                400: "Bad Request",
                403: "Forbidden: bot was blocked by the user",
            }.get(status, "Internal Server Error")
        failure = _Failure(status, description, retry_after if status == 429 else None)
        self._failures.setdefault(method.lower(), []).extend([failure] * count)

    def push_update(self, raw: JSONDict) -> int:
        update = {**raw, "update_id": next(self._update_ids)}
        self._updates.append(update)
        self._notify()
        return int(update["update_id"])

    def push_text(
        self, user_id: int, text: str, *, chat_id: int | None = None, first_name: str = "小明",
        username: str | None = None,
    ) -> int:  # fmt: skip
        content: JSONDict = {"text": text}
        if text.startswith("/"):
            # Telegram tags the command token ("/start" or "/start@bot"); aiogram's Command filter needs it.
            command = text.split(maxsplit=1)[0]
            content["entities"] = [{"type": "bot_command", "offset": 0, "length": utf16_len(command)}]
        return self._push_message(user_id, chat_id, first_name, username, content)

    def push_sticker(
        self, user_id: int, *, emoji: str = "😊", chat_id: int | None = None, first_name: str = "小明",
        username: str | None = None,
    ) -> int:  # fmt: skip
        sticker = {
            **self._file("sticker"), "type": "regular", "width": 512, "height": 512,
            "is_animated": False, "is_video": False, "emoji": emoji,
        }  # fmt: skip
        return self._push_message(user_id, chat_id, first_name, username, {"sticker": sticker})

    def push_photo(
        self, user_id: int, *, caption: str | None = None, chat_id: int | None = None,
        first_name: str = "小明", username: str | None = None,
    ) -> int:  # fmt: skip
        # Telegram always sends several resolutions, smallest first.
        sizes = [(90, 67, 1200), (320, 240, 15000), (1280, 960, 120000)]
        photo = [{**self._file("photo"), "width": w, "height": h, "file_size": b} for w, h, b in sizes]
        content: JSONDict = {"photo": photo} if caption is None else {"photo": photo, "caption": caption}
        return self._push_message(user_id, chat_id, first_name, username, content)

    def push_voice(
        self, user_id: int, *, duration: int = 3, chat_id: int | None = None, first_name: str = "小明",
        username: str | None = None,
    ) -> int:  # fmt: skip
        voice = {**self._file("voice"), "duration": duration, "mime_type": "audio/ogg", "file_size": 4000}
        return self._push_message(user_id, chat_id, first_name, username, {"voice": voice})

    def push_callback(
        self, user_id: int, message_id: int, data: str, *, chat_id: int | None = None, first_name: str = "小明",
    ) -> int:  # fmt: skip
        """A press on an inline button of a message the bot sent (as Telegram sends it: the message as it
        is now, with its keyboard, and the button's callback data)."""
        chat_id = user_id if chat_id is None else chat_id
        record = next((m for m in self._sent if m["chat_id"] == chat_id and m["message_id"] == message_id), None)
        if record is None:
            raise AssertionError(f"no sent message {message_id} in chat {chat_id}")
        user: JSONDict = {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "zh"}
        query = {"id": str(next(self._callback_ids)), "from": user, "chat_instance": str(chat_id),
                 "message": self._message_json(record), "data": data}
        return self.push_update({"callback_query": query})

    # ---- group chats ----------------------------------------------------------------------------

    def add_group(self, chat_id: int, title: str = "测试群", *, kind: str = "supergroup",
                  admins: tuple[int, ...] = ()) -> None:
        """Register a group chat (negative id) and its administrators (getChatMember answers from them)."""
        assert chat_id < 0 and kind in ("group", "supergroup")
        self._chats[chat_id] = {"id": chat_id, "type": kind, "title": title}
        self._admins[chat_id] = set(admins)

    def push_group_text(
        self, user_id: int, chat_id: int, text: str, *, first_name: str = "小明", last_name: str | None = None,
        reply_to: int | None = None, text_mention: tuple[int, int] | None = None,
    ) -> int:  # fmt: skip
        """A message in a group as Telegram sends it: ``@username`` tokens and a leading command are tagged
        as entities; ``reply_to`` names a message in this chat (the bot's or a user's); ``text_mention``
        (offset, length) tags a mention of the bot by name, as clients do for users without a username."""
        if chat_id not in self._chats:
            self.add_group(chat_id)
        self._group_members.add(user_id)
        entities: list[JSONDict] = []
        if text.startswith("/"):
            command = text.split(maxsplit=1)[0]
            entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command)})
        for found in re.finditer(r"@[A-Za-z0-9_]{5,32}", text):
            if found.start() > 0 and text[found.start() - 1].isascii() and text[found.start() - 1].isalnum():
                continue  # part of an address like name@example, not a mention
            if entities and entities[0]["type"] == "bot_command" and found.start() < entities[0]["length"]:
                continue  # "/help@bot": the mention is part of the command entity
            entities.append({"type": "mention", "offset": utf16_len(text[:found.start()]),
                             "length": utf16_len(found.group())})
        if text_mention is not None:
            entities.append({"type": "text_mention", "offset": text_mention[0], "length": text_mention[1],
                             "user": dict(self.bot_user)})
        content: JSONDict = {"text": text}
        if entities:
            content["entities"] = sorted(entities, key=lambda e: int(e["offset"]))
        if reply_to is not None:
            content["reply_to_message"] = self._replied(chat_id, reply_to)
        user_update = self._push_message(user_id, chat_id, first_name, None, content)
        if last_name:
            self._updates[-1]["message"]["from"]["last_name"] = last_name
        return user_update

    async def _get_chat(self, params: JSONDict) -> JSONDict:
        chat_id = self._require_chat(params)
        if chat_id not in self._chats:
            raise _ApiError(400, "Bad Request: chat not found")
        # ChatFullInfo: the chat and the few fields Telegram always sends.
        return {**self._chats[chat_id], "accent_color_id": 0, "max_reaction_count": 11,
                "accepted_gift_types": {"unlimited_gifts": False, "limited_gifts": False,
                                        "unique_gifts": False, "premium_subscription": False,
                                        "gifts_from_channels": False}}

    ANONYMOUS_ADMIN_ID = 1087968824  # GroupAnonymousBot: the "from" of messages an admin posts as the group
    CHANNEL_BOT_ID = 136817688  # Channel_Bot: the "from" of messages posted on behalf of a channel

    def push_group_as(self, chat_id: int, text: str, *, channel: tuple[int, str] | None = None,
                      automatic_forward: bool = False) -> int:
        """A group message whose sender is a chat, as Telegram sends it: an anonymous admin (``sender_chat``
        is the group itself) or, with ``channel`` (id, title), a post on behalf of that channel."""
        sender: JSONDict
        if channel is None:
            sender_chat, sender = self._chat(chat_id), {"id": self.ANONYMOUS_ADMIN_ID, "is_bot": True,
                                                        "first_name": "Group", "username": "GroupAnonymousBot"}
        else:
            sender_chat = {"id": channel[0], "type": "channel", "title": channel[1]}
            sender = {"id": self.CHANNEL_BOT_ID, "is_bot": True, "first_name": "Channel", "username": "Channel_Bot"}
        update_id = self.push_group_text(int(sender["id"]), chat_id, text)
        message = self._updates[-1]["message"]
        message.update({"from": sender, "sender_chat": dict(sender_chat)})
        if channel is None:
            message["author_signature"] = "管理员"
        if automatic_forward:
            message["is_automatic_forward"] = True
        return update_id

    def push_migration(self, old_chat_id: int, new_chat_id: int) -> tuple[int, int]:
        """A group upgraded to a supergroup: Telegram sends ``migrate_to_chat_id`` in the old chat, then
        ``migrate_from_chat_id`` in the new one (posted by the group itself); the old id stops working."""
        old = self._chats.get(old_chat_id, {"title": "测试群"})
        admins = self._admins.get(old_chat_id, set())
        self._chats[old_chat_id] = {"id": old_chat_id, "type": "group", "title": old.get("title", "测试群")}
        self.add_group(new_chat_id, str(old.get("title", "测试群")), admins=tuple(admins))
        user: JSONDict = {"id": next(iter(admins), 1), "is_bot": False, "first_name": "管理员"}
        first = self.push_update({"message": {"message_id": next(self._message_ids), "date": int(time.time()),
                                              "chat": self._chats[old_chat_id], "from": user,
                                              "migrate_to_chat_id": new_chat_id}})
        group = {"id": self.ANONYMOUS_ADMIN_ID, "is_bot": True, "first_name": "Group", "username": "GroupAnonymousBot"}
        second = self.push_update({"message": {"message_id": 1, "date": int(time.time()),
                                               "chat": self._chats[new_chat_id], "from": group,
                                               "sender_chat": self._chats[new_chat_id],
                                               "migrate_from_chat_id": old_chat_id}})
        return first, second

    def _replied(self, chat_id: int, message_id: int) -> JSONDict:
        sent = next((m for m in self._sent if m["chat_id"] == chat_id and m["message_id"] == message_id), None)
        if sent is not None:
            return self._message_json(sent)
        pushed = self._pushed.get((chat_id, message_id))
        if pushed is None:
            raise AssertionError(f"no message {message_id} in chat {chat_id} to reply to")
        return {k: v for k, v in pushed.items() if k != "reply_to_message"}

    async def _get_chat_member(self, params: JSONDict) -> JSONDict:
        chat_id = self._require_chat(params)
        user_id = params.get("user_id")
        if chat_id not in self._chats or not isinstance(user_id, int):
            raise _ApiError(400, "Bad Request: chat not found")
        user: JSONDict = {"id": user_id, "is_bot": False, "first_name": "User"}
        if user_id in self._admins.get(chat_id, set()):
            rights = dict.fromkeys((
                "can_manage_chat", "can_delete_messages", "can_manage_video_chats", "can_restrict_members",
                "can_promote_members", "can_change_info", "can_invite_users", "can_post_stories",
                "can_edit_stories", "can_delete_stories", "can_send_welcome_messages",
            ), True)  # fmt: skip
            return {"status": "administrator", "user": user, "can_be_edited": False, "is_anonymous": False, **rights}
        return {"status": "member", "user": user}

    def buttons(self, record: JSONDict) -> list[tuple[str, str]]:
        """(text, callback data) of every inline button of a sent message, row by row."""
        markup = record.get("reply_markup")
        if not isinstance(markup, dict):
            return []
        return [(str(b["text"]), str(b.get("callback_data", ""))) for row in markup.get("inline_keyboard", [])
                for b in row]

    async def wait_for_callback_answers(self, count: int, timeout: float = 10.0) -> list[JSONDict]:
        await self._wait_until(lambda: len(self.callback_answers) >= count, timeout,
                               lambda: f"{len(self.callback_answers)} callback answers, wanted {count}")
        return list(self.callback_answers)

    async def wait_for_edit(self, chat_id: int, message_id: int, contains: str, timeout: float = 10.0) -> JSONDict:
        def edited() -> JSONDict | None:
            return next((m for m in self._sent if m["chat_id"] == chat_id and m["message_id"] == message_id
                         and contains in str(m["text"])), None)

        await self._wait_until(lambda: edited() is not None, timeout, lambda: f"message {message_id} not edited")
        found = edited()
        assert found is not None
        return dict(found)

    def clear(self) -> None:
        """Forget recorded traffic; queued updates, commands and id counters are kept."""
        self.calls.clear()
        self.body_types.clear()
        self._sent.clear()
        self._actions.clear()

    def sent_messages(self, chat_id: int | None = None) -> list[JSONDict]:
        """Messages the bot sent (current text after edits), oldest first."""
        return [dict(m) for m in self._sent if chat_id is None or m["chat_id"] == chat_id]

    def chat_actions(self, chat_id: int | None = None) -> list[JSONDict]:
        return [dict(a) for a in self._actions if chat_id is None or a["chat_id"] == chat_id]

    @property
    def pending_updates(self) -> list[JSONDict]:
        """Updates not yet confirmed by a getUpdates offset."""
        return list(self._updates)

    async def wait_for_messages(self, chat_id: int, count: int, timeout: float = 10.0) -> list[JSONDict]:
        def describe() -> str:
            got = [m["text"] for m in self.sent_messages(chat_id)]
            return (
                f"expected >= {count} message(s) to chat {chat_id} within {timeout}s, got {len(got)}: "
                f"{got!r}; to other chats: {len(self._sent) - len(got)}; last calls: {self._call_names(10)}"
            )

        await self._wait_until(lambda: len(self.sent_messages(chat_id)) >= count, timeout, describe)
        return self.sent_messages(chat_id)

    async def wait_for_call(self, method: str, timeout: float = 10.0, *, count: int = 1) -> JSONDict:
        """Wait for the ``count``-th call of ``method`` (earlier history included); return its params."""

        def matching() -> list[JSONDict]:
            return [p for name, p in self.calls if name.lower() == method.lower()]

        def describe() -> str:
            return f"{method} called {len(matching())} time(s), wanted {count}; calls: {self._call_names(20)}"

        await self._wait_until(lambda: len(matching()) >= count, timeout, describe)
        return matching()[count - 1]

    def _call_names(self, last: int) -> list[str]:
        return [name for name, _ in self.calls[-last:]]

    def _file(self, kind: str) -> JSONDict:
        n = next(self._file_ids)
        return {"file_id": f"{kind}-{n}", "file_unique_id": f"u{kind}{n}"}

    def _chat(self, chat_id: int) -> JSONDict:
        if chat_id in self._chats:
            return self._chats[chat_id]
        if chat_id < 0:
            return {"id": chat_id, "type": "supergroup", "title": "测试群"}
        return {"id": chat_id, "type": "private", "first_name": "User"}

    def _push_message(
        self, user_id: int, chat_id: int | None, first_name: str, username: str | None, content: JSONDict
    ) -> int:
        user: JSONDict = {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "zh"}
        if username:
            user["username"] = username
        chat_id = user_id if chat_id is None else chat_id
        if chat_id > 0:  # a private chat mirrors the user's names
            self._private_started.add(user_id)
            self._chats[chat_id] = {k: user[k] for k in ("first_name", "username") if k in user}
            self._chats[chat_id].update(id=chat_id, type="private")
        chat = self._chat(chat_id)
        message_id = next(self._message_ids)
        message = {"message_id": message_id, "date": int(time.time()), "chat": chat, "from": user, **content}
        self._pushed[(chat_id, message_id)] = message
        return self.push_update({"message": message})

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _ApiError(401, "Unauthorized").response()
        method = request.match_info["method"]
        params = await _read_params(request)
        self.calls.append((method, params))
        self.body_types.append((method, request.content_type))
        self._notify()
        try:
            if queued := self._failures.get(method.lower()):
                failure = queued.pop(0)
                extra = None if failure.retry_after is None else {"retry_after": failure.retry_after}
                raise _ApiError(failure.status, failure.description, extra)
            handler = self._methods.get(method.lower())
            if handler is None:
                raise _ApiError(404, "Not Found: method not found")
            result = await handler(params)
        except _ApiError as err:
            return err.response()
        self._notify()  # waiters on recorded sends/actions re-check now that the handler has run
        return web.json_response({"ok": True, "result": result})

    async def _true(self, params: JSONDict) -> bool:
        return True

    async def _get_me(self, params: JSONDict) -> JSONDict:
        return dict(self.bot_user)

    async def _set_my_commands(self, params: JSONDict) -> bool:
        commands = params.get("commands")
        if not isinstance(commands, list):
            raise _ApiError(400, 'Bad Request: parameter "commands" is required')
        # Telegram rejects "/start", "Start" or over-long names; better to learn that here than in production.
        if not all(_COMMAND_RE.fullmatch(str(cmd.get("command", ""))) for cmd in commands):
            raise _ApiError(400, "Bad Request: BOT_COMMAND_INVALID")
        self.commands = commands
        return True

    async def _get_my_commands(self, params: JSONDict) -> list[JSONDict]:
        return list(self.commands or [])

    async def _delete_my_commands(self, params: JSONDict) -> bool:
        self.commands = None
        return True

    async def _set_scoped_commands(self, params: JSONDict) -> bool:
        scope = params.get("scope")
        if scope is None or scope == {"type": "default"}:
            return await self._set_my_commands(params)
        if not isinstance(scope, dict) or scope.get("type") not in _COMMAND_SCOPES:
            raise _ApiError(400, "Bad Request: wrong parameter scope")
        needs_chat = scope["type"] in ("chat", "chat_administrators", "chat_member")
        if needs_chat and not isinstance(scope.get("chat_id"), int):
            raise _ApiError(400, "Bad Request: chat not found")
        previous = self.commands
        await self._set_my_commands(params)  # the same checks on the commands themselves
        self.commands, self.scoped_commands[_scope_key(scope)] = previous, list(params["commands"])
        return True

    async def _get_scoped_commands(self, params: JSONDict) -> list[JSONDict]:
        scope = params.get("scope")
        if scope is None or scope == {"type": "default"}:
            return await self._get_my_commands(params)
        return list(self.scoped_commands.get(_scope_key(scope), []))

    def commands_for(self, scope: JSONDict) -> list[JSONDict] | None:
        """The menu set for one scope, e.g. ``{"type": "chat", "chat_id": 42}``; None if never set."""
        if scope == {"type": "default"}:
            return self.commands
        return self.scoped_commands.get(_scope_key(scope))

    def menus_by_type(self) -> dict[str, list[JSONDict]]:
        """Menus of the chat-independent scopes by type ("default", "all_group_chats", ...)."""
        found = {str(json.loads(k)["type"]): v for k, v in self.scoped_commands.items() if "chat_id" not in k}
        if self.commands is not None:
            found["default"] = self.commands
        return found

    async def _send_upload(self, params: JSONDict, field: str) -> JSONDict:
        upload = params.get(field)
        if isinstance(upload, str) and upload.startswith("attach://"):  # the file sent under another field name
            upload = params.get(upload.removeprefix("attach://"))
        if not isinstance(upload, dict) or not upload.get("size"):
            raise _ApiError(400, f"Bad Request: there is no {field} in the request")
        caption = params.get("caption")
        if caption is not None and utf16_len(str(caption)) > MAX_CAPTION_LENGTH:
            raise _ApiError(400, "Bad Request: message caption is too long")
        record: JSONDict = {
            "chat_id": self._require_chat(params), "kind": field, "file": upload, "caption": caption,
            "message_id": next(self._message_ids), "date": int(time.time()), "params": params,
        }
        self.uploads.append(record)
        message: JSONDict = {"message_id": record["message_id"], "date": record["date"],
                             "chat": self._chat(record["chat_id"]), "from": dict(self.bot_user)}
        file_id = f"file{next(self._file_ids)}"
        if field == "photo":
            message["photo"] = [{"file_id": file_id, "file_unique_id": file_id, "width": 1, "height": 1}]
        else:
            message["document"] = {"file_id": file_id, "file_unique_id": file_id, "file_name": upload.get("filename")}
        if caption is not None:
            message["caption"] = caption
        return message

    async def _send_document(self, params: JSONDict) -> JSONDict:
        return await self._send_upload(params, "document")

    async def _send_photo(self, params: JSONDict) -> JSONDict:
        return await self._send_upload(params, "photo")

    def sent_uploads(self, chat_id: int | None = None) -> list[JSONDict]:
        return [u for u in self.uploads if chat_id is None or u["chat_id"] == chat_id]

    async def wait_for_uploads(self, chat_id: int, count: int, timeout: float = 10.0) -> list[JSONDict]:
        await self._wait_until(lambda: len(self.sent_uploads(chat_id)) >= count, timeout,
                               lambda: f"expected {count} uploads to {chat_id}, got {len(self.sent_uploads(chat_id))}")
        return self.sent_uploads(chat_id)

    async def _send_chat_action(self, params: JSONDict) -> bool:
        chat_id = self._require_chat(params)
        action = params.get("action")
        if action not in _CHAT_ACTIONS:
            raise _ApiError(400, "Bad Request: wrong parameter action in request")
        self._actions.append({"chat_id": chat_id, "action": action})
        return True

    async def _send_message(self, params: JSONDict) -> JSONDict:
        chat_id = self._require_chat(params)
        if chat_id > 0 and chat_id in self._group_members and chat_id not in self._private_started:
            raise _ApiError(403, "Forbidden: bot can't initiate conversation with a user")
        reply_to = params.get("reply_parameters")
        record: JSONDict = {
            "chat_id": chat_id,
            "reply_to": reply_to.get("message_id") if isinstance(reply_to, dict) else params.get("reply_to_message_id"),
            "text": self._check_text(params.get("text")),
            "message_id": next(self._message_ids),
            "date": int(time.time()),
            "parse_mode": params.get("parse_mode"),
            "reply_markup": params.get("reply_markup"),
            "params": params,
        }
        self._sent.append(record)
        return self._message_json(record)

    async def _edit_message_text(self, params: JSONDict) -> JSONDict:
        chat_id = self._require_chat(params)
        text = self._check_text(params.get("text"))
        for record in self._sent:
            if record["chat_id"] == chat_id and record["message_id"] == params.get("message_id"):
                break
        else:
            raise _ApiError(400, "Bad Request: message to edit not found")
        # Telegram rejects no-op edits; a bot that re-edits with unchanged text must cope with that.
        if record["text"] == text and record["reply_markup"] == params.get("reply_markup"):
            raise _ApiError(400, _NOT_MODIFIED)
        record.update(text=text, parse_mode=params.get("parse_mode"), reply_markup=params.get("reply_markup"))
        record["edit_date"] = int(time.time())
        return self._message_json(record)

    async def _answer_callback_query(self, params: JSONDict) -> bool:
        if not params.get("callback_query_id"):
            raise _ApiError(400, "Bad Request: query is too old and response timeout expired or query ID is invalid")
        self.callback_answers.append(dict(params))
        return True

    async def _edit_message_reply_markup(self, params: JSONDict) -> JSONDict:
        chat_id = self._require_chat(params)
        for record in self._sent:
            if record["chat_id"] == chat_id and record["message_id"] == params.get("message_id"):
                break
        else:
            raise _ApiError(400, "Bad Request: message to edit not found")
        if record["reply_markup"] == params.get("reply_markup"):
            raise _ApiError(400, _NOT_MODIFIED)
        record["reply_markup"] = params.get("reply_markup")
        return self._message_json(record)

    def _confirm(self, update_id: int) -> None:
        self._updates = [u for u in self._updates if u["update_id"] != update_id]
        self._notify()

    async def _set_webhook(self, params: JSONDict) -> bool:
        url = str(params.get("url") or "")
        if not url:
            await self.webhook.delete()
            return True
        if not url.startswith(("http://", "https://")):
            raise _ApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        secret = str(params.get("secret_token") or "")
        if secret and not re.fullmatch(r"[A-Za-z0-9_-]{1,256}", secret):
            raise _ApiError(400, "Bad Request: secret token contains unallowed characters")
        if params.get("drop_pending_updates"):
            self._updates = []
        allowed = params.get("allowed_updates")
        self.webhook.set(url, secret, allowed if isinstance(allowed, list) else None)
        return True

    async def _delete_webhook(self, params: JSONDict) -> bool:
        await self.webhook.delete()
        if params.get("drop_pending_updates"):
            self._updates = []
        return True

    async def _get_webhook_info(self, params: JSONDict) -> JSONDict:
        return self.webhook.info()

    async def _get_updates(self, params: JSONDict) -> list[JSONDict]:
        if self.webhook.url:
            raise _ApiError(409, "Conflict: can't use getUpdates method while webhook is active; "
                                 "use deleteWebhook to delete the webhook first")
        offset = params.get("offset")
        # Confirmation is permanent, as on Telegram; a negative offset keeps only the newest -offset.
        if isinstance(offset, int) and offset > 0:
            self._updates = [u for u in self._updates if u["update_id"] >= offset]
        elif isinstance(offset, int) and offset < 0:
            self._updates = self._updates[offset:]
        limit = min(max(int(params.get("limit") or MAX_UPDATES_LIMIT), 1), MAX_UPDATES_LIMIT)
        timeout = max(float(params.get("timeout") or 0), 0.0)
        with contextlib.suppress(AssertionError):
            await self._wait_until(lambda: bool(self._updates) or self._closing, timeout, lambda: "")
        return self._updates[:limit]

    def _require_chat(self, params: JSONDict) -> int:
        chat_id = params.get("chat_id")
        if chat_id is None or chat_id == "":
            raise _ApiError(400, "Bad Request: chat_id is empty")
        if not isinstance(chat_id, int):  # e.g. "@channel": no such chat exists here
            raise _ApiError(400, "Bad Request: chat not found")
        return chat_id

    def _check_text(self, text: Any) -> str:
        # Telegram strips surrounding whitespace, so a blank string counts as empty.
        if not isinstance(text, str) or not text.strip():
            raise _ApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > MAX_MESSAGE_LENGTH:
            raise _ApiError(400, "Bad Request: message is too long")
        return text

    def _message_json(self, record: JSONDict) -> JSONDict:
        message: JSONDict = {
            "message_id": record["message_id"],
            "date": record["date"],
            "chat": self._chat(record["chat_id"]),
            "from": dict(self.bot_user),
            "text": record["text"],
        }
        if "edit_date" in record:
            message["edit_date"] = record["edit_date"]
        if isinstance(record["reply_markup"], dict) and "inline_keyboard" in record["reply_markup"]:
            message["reply_markup"] = record["reply_markup"]
        return message
