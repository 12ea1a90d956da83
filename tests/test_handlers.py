"""aiogram's real dispatcher and client against FakeTelegram, with the real engine and FakeLLM."""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest
from aiogram import Router
from aiogram.filters import Command
from aiogram.filters.command import CommandException
from aiogram.types import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.chat import texts
from companion.core.models import Scope
from handlers import build_router
from handlers.chat import conversation
from handlers.delivery import TYPING_AFTER_SECONDS
from tests.scripted import user_words
from tests.support import USER, Live


async def test_not_started_help_and_start(live: Live) -> None:
    assert await live.say("你好", 1) == texts.NOT_STARTED
    assert await live.say("/help", 2) == texts.HELP
    assert await live.say("/start_aiGF", 3) == texts.GREETING_NEW
    assert live.rig.chat.is_active(Scope(USER))
    assert [c["command"] for c in live.tg.commands or []] == list(texts.COMMANDS)
    assert "memories" in texts.COMMANDS and "forget" in texts.COMMANDS


async def test_lower_case_command_from_the_menu_works(live: Live) -> None:
    assert await live.say("/start_aigf", 1) == texts.GREETING_NEW
    assert await live.say("/stop_aigf", 2) == texts.STOPPED


async def test_quick_messages_become_one_turn_with_typing(live: Live) -> None:
    await live.say("/start_aiGF", 1)

    async def slow_reply(body: object) -> str:  # slower than TYPING_AFTER_SECONDS: "typing…" is shown meanwhile
        await asyncio.sleep(TYPING_AFTER_SECONDS + 0.5)
        return "收到你的三句话啦"

    live.llm.set_chat_reply(slow_reply)
    for text in ("在吗", "今天好累", "加班到十点"):
        live.tg.push_text(USER, text)
        await asyncio.sleep(0.05)
    sent = await live.tg.wait_for_messages(USER, 2)
    await asyncio.sleep(0.5)
    assert len(live.tg.sent_messages(USER)) == 2
    assert sent[1]["text"] == "收到你的三句话啦"
    chats = live.llm.chat_requests()
    assert len(chats) == 1
    assert user_words(chats[0]["messages"][-1]["content"]) == "在吗\n今天好累\n加班到十点"
    assert {"chat_id": USER, "action": "typing"} in live.tg.chat_actions(USER)


async def test_long_reply_is_split_under_telegram_limit(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    paragraph = "这是一段很长的回复。" * 100
    live.llm.set_chat_reply("\n\n".join([paragraph] * 9))
    live.tg.push_text(USER, "讲个长故事")
    await asyncio.sleep(1.0)
    parts = [m["text"] for m in live.tg.sent_messages(USER)[1:]]
    assert len(parts) >= 3
    assert all(texts.utf16_len(p) <= 4096 for p in parts)
    assert "".join(parts).replace("\n", "") == "".join([paragraph] * 9)


@pytest.mark.parametrize("kind", ["sticker", "photo", "voice"])
async def test_non_text_gets_a_friendly_answer(live: Live, kind: str) -> None:
    await live.say("/start_aiGF", 1)
    getattr(live.tg, f"push_{kind}")(USER)
    sent = await live.tg.wait_for_messages(USER, 2)
    assert sent[1]["text"] == texts.NON_TEXT


async def test_text_sent_just_before_stop_is_answered_before_the_stop_confirmation(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.llm.set_chat_reply("先回答你这句")
    # One getUpdates batch: aiogram handles its updates as concurrent tasks.
    live.tg.push_text(USER, "这句话还在缓冲里")
    live.tg.push_text(USER, "/stop_aiGF")
    sent = await live.tg.wait_for_messages(USER, 3)
    await asyncio.sleep(0.5)
    assert [m["text"] for m in live.tg.sent_messages(USER)] == [texts.GREETING_NEW, "先回答你这句", texts.STOPPED]
    assert sent[2]["text"] == texts.STOPPED
    assert [user_words(r["messages"][-1]["content"]) for r in live.llm.chat_requests()] == ["这句话还在缓冲里"]
    assert not live.rig.chat.is_active(Scope(USER))
    # The stop hands the queued turns to extraction: the text reached memory.
    extraction = await live.llm.wait_for_requests(1, live.llm.is_json_mode)
    assert "这句话还在缓冲里" in live.llm.request_text(extraction[0])


async def test_stop_while_the_reply_is_being_written_comes_after_it(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.llm.set_chat_reply("慢慢写好的回复")
    live.llm.delay_next(0.6)
    live.tg.push_text(USER, "在吗")
    await live.llm.wait_for_requests(1, lambda body: not live.llm.is_json_mode(body))
    live.tg.push_text(USER, "/stop_aiGF")
    await live.tg.wait_for_messages(USER, 3)
    assert [m["text"] for m in live.tg.sent_messages(USER)] == [texts.GREETING_NEW, "慢慢写好的回复", texts.STOPPED]


async def test_text_after_stop_is_refused_in_order(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.tg.push_text(USER, "/stop_aiGF")
    live.tg.push_text(USER, "还在吗")
    await live.tg.wait_for_messages(USER, 3)
    assert [m["text"] for m in live.tg.sent_messages(USER)] == [texts.GREETING_NEW, texts.STOPPED, texts.NOT_STARTED]
    assert live.llm.chat_requests() == []


async def test_flood_limit_on_a_reply_is_waited_out_and_the_reply_sent_once(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.llm.set_chat_reply("等一下也要送到")
    live.tg.fail_next("sendMessage", 1, status=429, retry_after=1)
    live.tg.push_text(USER, "在吗")
    sent = await live.tg.wait_for_messages(USER, 2, timeout=10)
    await asyncio.sleep(0.3)
    assert [m["text"] for m in live.tg.sent_messages(USER)] == [texts.GREETING_NEW, "等一下也要送到"]
    assert [name for name, _ in live.tg.calls].count("sendMessage") == 3  # greeting, the 429, the retry
    assert sent[1]["text"] == "等一下也要送到"


@pytest.mark.parametrize("text", ["我感冒了", "/help"], ids=["reply", "command-answer"])
async def test_user_who_blocked_the_bot_is_switched_off_with_one_info_line(
    live: Live, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    await live.say("/start_aiGF", 1)
    live.tg.fail_next("sendMessage", 1, status=403)
    with caplog.at_level(logging.INFO):
        live.tg.push_text(USER, text)
        for _ in range(200):
            if not live.rig.chat.is_active(Scope(USER)):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    assert not live.rig.chat.is_active(Scope(USER))
    assert Scope(USER) not in await live.rig.engine.active_scopes(), "the flag must survive a restart"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert [r.getMessage() for r in caplog.records if "blocked the bot" in r.getMessage()] == [
        f"user {Scope(USER).key} blocked the bot; companion mode switched off"
    ]
    assert live.tg.sent_messages(USER)[1:] == []


async def test_special_characters_are_sent_verbatim(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    reply = "*不是粗体* _也不是斜体_ <b>标签</b> & [链接](x) `代码` 😀"
    live.llm.set_chat_reply(reply)
    assert await live.say("<script>alert(1)</script> *hi*", 2) == reply
    assert live.tg.sent_messages(USER)[-1]["parse_mode"] is None


async def test_huge_and_odd_user_text_is_answered(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    text = "测" * 4096
    await live.say(text, 2)
    assert user_words(live.llm.chat_requests()[-1]["messages"][-1]["content"]) == text


async def test_llm_down_gives_a_friendly_message(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.llm.fail_next(1, status=500)
    assert await live.say("在吗", 2) == texts.LLM_DOWN


async def test_a_server_error_on_send_is_retried_and_the_reply_arrives_once(live: Live) -> None:
    live.tg.fail_next("sendMessage", 2, status=502)
    assert await live.say("/help", 1) == texts.HELP
    await asyncio.sleep(0.3)
    assert [m["text"] for m in live.tg.sent_messages(USER)] == [texts.HELP]  # not lost, not doubled


async def test_a_send_that_keeps_failing_is_caught_and_the_bot_keeps_working(live: Live) -> None:
    live.tg.fail_next("sendMessage", 4, status=500)  # the first try and every retry fail
    live.tg.push_text(USER, "/help")
    sent = await live.tg.wait_for_messages(USER, 1, timeout=15)
    assert sent[0]["text"] == texts.INTERNAL_ERROR
    assert await live.say("/help", 2) == texts.HELP


SPACES = st.text(alphabet=" \t\n\u3000\u00a0\u2003", max_size=3)


@functools.cache
def built_router() -> Router:
    """The bot's routers, built once for the property tests below: they read its filters and never attach it
    to a dispatcher, and each build costs ~25 ms, a few hundred times per test."""
    return build_router()


def _commands(router: Router) -> list[Command]:
    return [f.callback for r in router.chain_tail for observer in r.observers.values()
            for handler in observer.handlers for f in handler.filters or () if isinstance(f.callback, Command)]


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(), st.builds(lambda ws, rest: f"{ws}/{rest}", SPACES, st.text())),
       as_caption=st.booleans())
def test_what_the_conversation_router_takes_no_command_would(text: str, as_caption: bool) -> None:
    """The conversation router runs before the command routers (handlers.chat): a text it takes must be one
    every ``Command`` of the bot refuses, or it would hide that command."""
    fields = {"caption": text, "photo": []} if as_caption else {"text": text}
    message = Message.model_validate({"message_id": 1, "date": 0, "chat": {"id": USER, "type": "private"},
                                      **fields})
    if not conversation(message):
        return
    commands = _commands(built_router())
    assert len(commands) > 20
    for command in commands:
        try:
            found = command.extract_command(text)
        except CommandException:
            continue
        assert found.prefix not in command.prefix, text


async def _takers(router: Router, message: Message) -> list[str]:
    """The handlers of ``router`` and the routers under it whose filters, and their routers', pass."""
    observer = router.message
    passed, _ = await observer.check_root_filters(message, bot=None)
    if not passed:
        return []
    found = [f"{router.name}.{handler.callback.__name__}" for handler in observer.handlers
             if (await handler.check(message, bot=None))[0]]
    for below in router.sub_routers:
        found += await _takers(below, message)
    return found


@settings(max_examples=200, deadline=None)
@given(text=st.one_of(st.text(min_size=1), st.builds(lambda ws, rest: f"{ws}/{rest}", SPACES, st.text())),
       as_caption=st.booleans())
async def test_no_router_the_conversation_router_now_precedes_would_take_its_messages(
        text: str, as_caption: bool) -> None:
    """Running the conversation router first routes every update as before: no handler of the routers it
    precedes (groups, commands, operators, ...) passes for a private message it takes."""
    fields = {"caption": text, "photo": []} if as_caption else {"text": text}
    message = Message.model_validate({"message_id": 1, "date": 0, "chat": {"id": USER, "type": "private"},
                                      "from": {"id": USER, "is_bot": False, "first_name": "A"}, **fields})
    if not conversation(message):
        return
    routers = built_router().sub_routers
    names = [router.name for router in routers]
    start, end = names.index("conversation"), names.index("chat")
    assert end - start > 6 and "groups" in names[start:end]
    for router in routers[start + 1:end]:
        assert await _takers(router, message) == [], text


async def test_a_command_after_spaces_and_talk_that_looks_like_one(live: Live) -> None:
    assert await live.say(" /help", 1) == texts.HELP  # aiogram's Command reads past leading whitespace
    assert await live.say("/start_aiGF", 2) == texts.GREETING_NEW
    assert await live.say("/nonsense", 3) == texts.help_text()
    live.llm.set_chat_reply("嗯，我在听")
    assert await live.say("在吗 /help", 4) == "嗯，我在听"
