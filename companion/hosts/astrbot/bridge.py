"""What the plugin needs from AstrBot besides its decorators: the speaker of an event, the model for
learning (AstrBot's own provider), sending to a user's private chat, and one safe log line for a failure.
AstrBot's objects are met through the few methods used (Protocols), so this module is type-checked with
the project while astrbot itself is installed only in AstrBot's virtualenv."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Sequence
from typing import Any, Protocol

from companion.core.errors import LLMUnavailableError, StorageError
from companion.hosts.astrbot.scopes import Speaker
from companion.llm.jsonmodel import Message, json_object

logger = logging.getLogger("astrbot")  # AstrBot's own logger: its console and the WebUI's log show it


class Event(Protocol):
    message_str: str

    def get_platform_id(self) -> str: ...
    def get_sender_id(self) -> str: ...
    def get_group_id(self) -> str: ...


class Context(Protocol):
    """``astrbot.api.star.Context``, as far as the plugin uses it."""

    def get_using_provider(self) -> Any: ...
    def get_platform_inst(self, platform_id: str) -> Any: ...
    async def send_message(self, session: str, message_chain: Any) -> bool: ...


class ProviderModel:
    """The engine's JSON model over AstrBot's configured provider: no second API key. The provider is
    looked up at each call, so a provider added or switched in the WebUI is used at once."""

    def __init__(self, context: Context) -> None:
        self._context = context

    async def json(self, messages: Sequence[Message], *, purpose: str, max_tokens: int = 1200) -> dict[str, Any]:
        provider = self._context.get_using_provider()
        if provider is None:
            raise LLMUnavailableError(f"{purpose}: no provider configured in AstrBot")
        prompt = "\n\n".join(str(m.get("content") or "") for m in messages)
        try:
            answer = await provider.text_chat(prompt=prompt, contexts=[], system_prompt="")
        except Exception as exc:  # a provider's own errors, whatever the vendor
            raise LLMUnavailableError(f"{purpose}: {type(exc).__name__}") from exc
        text = (answer.completion_text or "").strip()
        if text.startswith("```"):
            text = text.strip("`").removeprefix("json").strip()
        return json_object(text, purpose)


    async def text(self, prompt: str) -> str:
        """One plain answer to ``prompt`` (a follow-up's words); ``LLMUnavailableError`` when there is none."""
        provider = self._context.get_using_provider()
        if provider is None:
            raise LLMUnavailableError("followup: no provider configured in AstrBot")
        try:
            answer = await provider.text_chat(prompt=prompt, contexts=[], system_prompt="")
        except Exception as exc:  # a provider's own errors, whatever the vendor
            raise LLMUnavailableError(f"followup: {type(exc).__name__}") from exc
        return (answer.completion_text or "").strip()


def can_write_first(context: Context, address: str) -> bool:
    """Whether the platform of ``address`` runs here and lets the bot start a message (its metadata says so)."""
    platform = context.get_platform_inst(address.split(":", 1)[0])
    return platform is not None and bool(platform.meta().support_proactive_message)


def speaker_of(event: Event) -> Speaker:
    return Speaker(str(event.get_platform_id()), str(event.get_sender_id()), str(event.get_group_id() or ""))


def words_of(event: Event) -> list[str]:
    """The command's arguments (the command word itself dropped)."""
    try:
        parts = shlex.split(event.message_str)
    except ValueError:
        parts = event.message_str.split()
    return parts[1:]


def private_address(event: Event) -> str:
    """The speaker's private chat as AstrBot's send API names it (``platform:FriendMessage:sender``)."""
    return f"{event.get_platform_id()}:FriendMessage:{event.get_sender_id()}"


async def send_to(context: Context, address: str, chain: object) -> bool:
    """Send on AstrBot's own API where the platform can start a message (its metadata says so); False
    where it cannot, where no such platform runs, or where the platform refuses (a user who never opened
    a private chat with the bot on Telegram)."""
    if not can_write_first(context, address):
        return False
    try:
        return bool(await context.send_message(address, chain))
    except Exception as exc:  # whatever the platform's client raises: the caller falls back
        logger.info("[companion_memory] no message to %s: %s", address.split(":", 1)[0], cause(exc))
        return False


def cause(exc: BaseException) -> str:
    """What failed, for a log line above DEBUG: the exception's type, and the words of a file or database
    error ("file is not a database", a path). Other errors may carry what a user said, so not theirs."""
    if isinstance(exc, OSError | StorageError):  # the store raises its database's errors as StorageError
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return type(exc).__name__


def failed(what: str, exc: BaseException) -> None:
    """One line naming the cause; the traceback only at DEBUG."""
    logger.warning("[companion_memory] %s failed, AstrBot goes on without memory: %s", what, cause(exc))
    logger.debug("[companion_memory] %s", what, exc_info=exc)
