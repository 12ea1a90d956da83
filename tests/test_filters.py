"""The bot's routers run every filter on the event loop, and a router that only answers commands is skipped at
once for a message that cannot be one (handlers/filters.py, handlers.commands.commands_router). Read through
aiogram's public fields and methods only: ``observer.handlers``, ``handler.filters``, ``awaitable``, and
``check_root_filters`` for the router-wide filters, which aiogram does not expose otherwise."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
from aiogram import F, Router
from aiogram.filters import Command
from aiogram.filters.command import CommandException
from aiogram.types import CallbackQuery, ErrorEvent, Message, TelegramObject, Update
from hypothesis import given, settings
from hypothesis import strategies as st

from handlers import build_router
from handlers.filters import Inline
from tests.support import USER

GROUP = -100777
SENDER = {"id": USER, "is_bot": False, "first_name": "A"}


def message(chat: str = "private", **fields: Any) -> Message:
    where = {"id": USER, "type": "private"} if chat == "private" else {"id": GROUP, "type": chat, "title": "g"}
    return Message.model_validate({"message_id": 1, "date": 0, "chat": where, "from": SENDER, **fields})


# Plain talk of every kind a router may meet: no command can take any of these.
TALK = [message(text="在吗"), message("supergroup", text="在吗"), message(photo=[]),
        message("group", photo=[]), message(caption="看这张", photo=[]), message("supergroup", caption="看", photo=[])]
# Every kind of message a router answers, so that each router's own filters all pass for one of them.
SAMPLES: dict[str, list[TelegramObject]] = {
    "message": [*TALK, message(text="/help"), message(text=" /help"), message("supergroup", text="/help"),
                message("supergroup", text="/help", sender_chat={"id": GROUP, "type": "supergroup", "title": "g"})],
    "callback_query": [CallbackQuery.model_validate({"id": "1", "from": SENDER, "chat_instance": "c", "data": "x"})],
    "error": [ErrorEvent(update=Update(update_id=1), exception=RuntimeError("boom"))],
}


@functools.cache
def built_router() -> Router:
    """The bot's routers, built once: the tests below read its filters and never attach it to a dispatcher,
    and each build costs ~25 ms, a few hundred times per property test."""
    return build_router()


def command_only(router: Router) -> bool:
    """Every message handler of ``router`` needs a ``Command`` and no router under it could hide behind it."""
    handlers = router.message.handlers
    return not router.sub_routers and bool(handlers) and all(
        any(isinstance(f.callback, Command) for f in h.filters or ()) for h in handlers)


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """aiogram sends a filter or handler it cannot await to ``asyncio.to_thread``: each such call is recorded
    and fails."""
    sent: list[str] = []

    async def to_thread(call: Any, /, *args: Any, **kwargs: Any) -> Any:
        sent.append(repr(getattr(call, "func", call)))  # aiogram hands it a partial holding the event
        raise AssertionError(f"run in a thread: {sent[-1]}")

    monkeypatch.setattr(asyncio, "to_thread", to_thread)
    return sent


def test_every_handler_and_filter_is_awaited_on_the_event_loop() -> None:
    checked = 0
    for router in built_router().chain_tail:
        for name, observer in router.observers.items():
            for handler in observer.handlers:
                assert handler.awaitable, f"{router.name}.{name}: {handler.callback!r}"
                for filter_ in handler.filters or ():
                    assert filter_.awaitable, f"{router.name}.{name}: {filter_.callback!r}"
                    checked += 1
    assert checked > 40


async def test_every_router_wide_filter_is_awaited_on_the_event_loop(no_threads: list[str]) -> None:
    """aiogram keeps a router's own filters (``router.message.filter(...)``) out of its public fields: each is
    run here, on samples one of which passes them all (so every one of them ran)."""
    observed = 0
    for router in built_router().chain_tail:
        for name, observer in router.observers.items():
            if not observer.handlers:
                continue
            passed = [event for event in SAMPLES[name] if (await observer.check_root_filters(event, bot=None))[0]]
            assert passed, f"{router.name}.{name}: no sample passes its filters"
            observed += 1
    assert observed > 10
    assert no_threads == []


async def test_the_command_gate_skips_a_command_only_router_for_talk_and_no_other(no_threads: list[str]) -> None:
    """A router whose every message handler needs a command refuses plain talk at its own filters; every other
    router lets some plain talk through them (a gate there would hide its handlers' messages)."""
    gated = 0
    for router in built_router().chain_tail:
        open_to = [m for m in TALK if (await router.message.check_root_filters(m, bot=None))[0]]
        if command_only(router):
            assert open_to == [], f"{router.name} takes talk: {open_to[0].text or open_to[0].caption!r}"
            gated += 1
        else:
            assert open_to, f"{router.name} is gated but answers more than commands"
    assert gated >= 5
    assert no_threads == []


SPACES = st.text(alphabet=" \t\n\u3000\u00a0\u2003", max_size=3)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.builds(lambda ws, rest: f"{ws}/{rest}", SPACES, st.text())),
       as_caption=st.booleans())
async def test_the_command_gate_never_refuses_a_command(text: str, as_caption: bool) -> None:
    """A command-only router is skipped for a private message its ``Command`` filters would all refuse anyway:
    one whose text (or caption) does not start, after whitespace, with a prefix. (In a private chat only the
    gate can refuse one: the routers' other own filters ask for a private chat or nothing.)"""
    fields = {"caption": text, "photo": []} if as_caption else {"text": text}
    event = Message.model_validate({"message_id": 1, "date": 0, "chat": {"id": USER, "type": "private"},
                                    **fields})
    gated = [router for router in built_router().chain_tail if command_only(router)]
    assert len(gated) >= 5
    for router in gated:
        if (await router.message.check_root_filters(event, bot=None))[0]:
            continue
        for handler in router.message.handlers:
            for command in (f.callback for f in handler.filters or () if isinstance(f.callback, Command)):
                try:
                    found = command.extract_command(text)
                except CommandException:
                    continue
                assert not text or found.prefix not in command.prefix, text


async def test_inline_answers_as_the_magic_filter_and_the_function_it_wraps() -> None:
    said = message(text="在吗")
    assert await Inline(F.text)(said) == "在吗"  # the value, as aiogram's own magic filter passes it on
    assert await Inline(F.chat.type == "private")(said) is True
    assert await Inline(~F.caption)(said) is True
    assert await Inline(lambda event: event.message_id + 1)(said) == 2
    assert repr(Inline(F.text)).startswith("Inline(")
