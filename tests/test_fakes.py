"""The fakes must behave like the real services as seen through the real aiogram and openai clients."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from aiogram import Bot, Dispatcher, F, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import (
    TelegramBadRequest,
    TelegramRetryAfter,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import BotCommand, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, Message
from openai import AsyncOpenAI

from tests.fakes import FakeLLM, FakeTelegram

CHAT = 42


def make_bot(tg: FakeTelegram, token: str | None = None) -> Bot:
    session = AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url))
    return Bot(token or tg.token, session=session)


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    b = make_bot(tg)
    yield b
    await b.session.close()  # no-op when start_polling already closed it


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
async def client(llm: FakeLLM) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(api_key="sk-test", base_url=llm.base_url, max_retries=0) as c:
        yield c


# ---- Telegram -------------------------------------------------------------------------------


async def test_basic_methods_are_recorded(tg: FakeTelegram, bot: Bot) -> None:
    me = await bot.get_me()
    assert (me.id, me.is_bot, me.username) == (123456, True, "companion_bot")

    sent = await bot.send_message(CHAT, "你好 <b>")
    html = await bot.send_message(CHAT, "<i>嗨</i>", parse_mode="HTML")
    group = await bot.send_message(-100123, "大家好")
    assert sent.text == "你好 <b>" and sent.chat.type == "private"
    assert sent.from_user is not None and sent.from_user.id == me.id
    assert html.message_id == sent.message_id + 1
    assert group.chat.type == "supergroup"
    records = tg.sent_messages(CHAT)
    assert [(m["text"], m["message_id"], m["parse_mode"]) for m in records] == [
        ("你好 <b>", sent.message_id, None),
        ("<i>嗨</i>", html.message_id, "HTML"),
    ]
    assert len(tg.sent_messages()) == 3

    assert tg.commands is None
    await bot.set_my_commands(
        [BotCommand(command="start", description="开始"), BotCommand(command="forget", description="忘")]
    )
    assert tg.commands == [
        {"command": "start", "description": "开始"},
        {"command": "forget", "description": "忘"},
    ]
    with pytest.raises(TelegramBadRequest, match="BOT_COMMAND_INVALID"):
        await bot.set_my_commands([BotCommand(command="/Start", description="x")])
    assert [c.command for c in await bot.get_my_commands()] == ["start", "forget"]

    assert await bot.send_chat_action(CHAT, "typing") is True
    assert tg.chat_actions() == [{"chat_id": CHAT, "action": "typing"}]
    assert [name for name, _ in tg.calls] == [
        "getMe", "sendMessage", "sendMessage", "sendMessage",
        "setMyCommands", "setMyCommands", "getMyCommands", "sendChatAction",
    ]  # fmt: skip

    tg.clear()
    assert tg.sent_messages() == [] and tg.calls == []


async def test_multipart_params_are_decoded(tg: FakeTelegram, bot: Bot) -> None:
    markup = InlineKeyboardMarkup(inline_keyboard=[[InlineKeyboardButton(text="好", callback_data="ok")]])
    msg = await bot.send_message(
        CHAT, "true", reply_markup=markup, disable_notification=True,
        link_preview_options=LinkPreviewOptions(is_disabled=True),
    )  # fmt: skip
    params = await tg.wait_for_call("sendMessage")
    assert params["chat_id"] == CHAT  # arrived as the form string "42"
    assert params["text"] == "true"  # free text is never JSON-decoded
    assert params["disable_notification"] is True
    assert params["link_preview_options"] == {"is_disabled": True}
    assert params["reply_markup"] == {"inline_keyboard": [[{"text": "好", "callback_data": "ok"}]]}
    assert msg.reply_markup is not None and msg.reply_markup.model_dump() == markup.model_dump()

    edited = await bot.edit_message_text("改过了", chat_id=CHAT, message_id=msg.message_id)
    assert isinstance(edited, Message) and edited.text == "改过了"
    assert tg.sent_messages(CHAT)[0]["text"] == "改过了"
    with pytest.raises(TelegramBadRequest, match="message to edit not found"):
        await bot.edit_message_text("x", chat_id=CHAT, message_id=999)


async def test_message_length_limit_counts_utf16(tg: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(CHAT, "字" * 4096)
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await bot.send_message(CHAT, "字" * 4097)
    # 2049 emoji are 4098 UTF-16 code units, so Telegram rejects them although len() is 2049.
    with pytest.raises(TelegramBadRequest, match="message is too long"):
        await bot.send_message(CHAT, "😀" * 2049)
    with pytest.raises(TelegramBadRequest, match="message text is empty"):
        await bot.send_message(CHAT, "   ")
    assert [len(m["text"]) for m in tg.sent_messages()] == [4096]


async def test_wrong_token_and_unknown_method(tg: FakeTelegram) -> None:
    wrong = make_bot(tg, token="999:WRONG")
    try:
        with pytest.raises(TelegramUnauthorizedError):
            await wrong.get_me()
    finally:
        await wrong.session.close()
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{tg.base_url}/bot{tg.token}/sendTelepathy") as resp:
            assert resp.status == 404
            body = await resp.json()
            assert body == {"ok": False, "error_code": 404, "description": "Not Found: method not found"}
        # JSON and urlencoded bodies work too (Telegram accepts both; aiogram only ever sends multipart).
        url = f"{tg.base_url}/bot{tg.token}/sendMessage"
        async with http.post(url, json={"chat_id": "-100777", "text": "json"}) as resp:
            chat = (await resp.json())["result"]["chat"]
            assert chat == {"id": -100777, "type": "supergroup", "title": "测试群"}
        async with http.post(url, data={"chat_id": "5", "text": "form", "parse_mode": "HTML"}) as resp:
            assert resp.status == 200
        assert [(m["chat_id"], m["text"], m["parse_mode"]) for m in tg.sent_messages()] == [
            (-100777, "json", None),
            (5, "form", "HTML"),
        ]
        # GET with a query string is accepted too, and timeout caps the wait when nothing arrives.
        started = time.monotonic()
        async with http.get(f"{tg.base_url}/bot{tg.token}/getUpdates", params={"timeout": "0.3"}) as resp:
            assert await resp.json() == {"ok": True, "result": []}
        assert 0.25 < time.monotonic() - started < 1.0


async def test_fail_next(tg: FakeTelegram, bot: Bot) -> None:
    tg.fail_next("sendMessage", status=500)
    tg.fail_next("sendMessage", status=429)
    with pytest.raises(TelegramServerError):
        await bot.send_message(CHAT, "一")
    with pytest.raises(TelegramRetryAfter) as info:
        await bot.send_message(CHAT, "二")
    assert info.value.retry_after == 1
    await bot.send_message(CHAT, "三")
    assert [m["text"] for m in tg.sent_messages()] == ["三"]
    assert [name for name, _ in tg.calls] == ["sendMessage"] * 3


async def test_long_poll_wakes_on_push_and_honours_offset(tg: FakeTelegram, bot: Bot) -> None:
    poll = asyncio.create_task(bot.get_updates(timeout=5))
    await tg.wait_for_call("getUpdates")
    await asyncio.sleep(0.05)
    assert not poll.done()
    started = time.monotonic()
    first = tg.push_text(7, "在吗", username="xiaoming")
    updates = await asyncio.wait_for(poll, 1.0)
    assert time.monotonic() - started < 0.5
    assert [u.update_id for u in updates] == [first]
    message = updates[0].message
    assert message is not None and message.text == "在吗" and message.chat.type == "private"
    assert message.from_user is not None and message.from_user.username == "xiaoming"

    second = tg.push_text(7, "/start hi")
    third = tg.push_text(8, "群里说话", chat_id=-100555)
    assert [u.update_id for u in await bot.get_updates(offset=second, timeout=0)] == [second, third]
    # Confirmation is permanent: a later poll without offset does not bring `first` back.
    assert [u.update_id for u in await bot.get_updates(timeout=0, limit=1)] == [second]
    again = await bot.get_updates(timeout=0)
    assert again[0].message is not None and again[0].message.entities is not None
    assert (again[0].message.entities[0].type, again[0].message.entities[0].length) == ("bot_command", 6)
    assert again[1].message is not None and again[1].message.chat.type == "supergroup"


async def test_media_updates_parse_in_aiogram(tg: FakeTelegram, bot: Bot) -> None:
    tg.push_sticker(7)
    tg.push_photo(7, caption="看")
    tg.push_voice(7, duration=5)
    edited = {"message_id": 1, "date": 0, "chat": {"id": 7, "type": "private"}, "text": "改"}
    raw = tg.push_update({"edited_message": edited})
    updates = await bot.get_updates(timeout=0)
    msgs = [u.message for u in updates[:3]]
    assert msgs[0] is not None and msgs[0].sticker is not None and msgs[0].sticker.emoji == "😊"
    assert msgs[1] is not None and msgs[1].photo is not None and len(msgs[1].photo) == 3
    assert msgs[1].caption == "看"
    assert msgs[2] is not None and msgs[2].voice is not None and msgs[2].voice.duration == 5
    assert updates[3].update_id == raw and updates[3].edited_message is not None


async def test_dispatcher_echo_round_trip(tg: FakeTelegram, bot: Bot) -> None:
    router = Router()

    @router.message(F.text)
    async def echo(message: Message) -> None:
        await message.answer(f"回声：{message.text}")

    dp = Dispatcher()
    dp.include_router(router)
    polling = asyncio.create_task(dp.start_polling(bot, handle_signals=False))
    try:
        update_id = tg.push_text(CHAT, "你好")
        sent = await tg.wait_for_messages(CHAT, 1, timeout=3)
        assert [m["text"] for m in sent] == ["回声：你好"]
        # The dispatcher confirms what it handled by polling again with offset = last update_id + 1.
        assert (await tg.wait_for_call("getUpdates", count=2, timeout=3))["offset"] == update_id + 1
        assert tg.pending_updates == []
    finally:
        await dp.stop_polling()
        await asyncio.wait_for(polling, 2)
    assert bot.session._session is not None and bot.session._session.closed  # type: ignore[attr-defined]


async def test_wait_for_messages_explains_timeout(tg: FakeTelegram, bot: Bot) -> None:
    await bot.send_message(CHAT, "只有一条")
    with pytest.raises(AssertionError, match=r"expected >= 2 message\(s\) to chat 42.*只有一条"):
        await tg.wait_for_messages(CHAT, 2, timeout=0.1)


# ---- LLM ------------------------------------------------------------------------------------


async def test_default_reply_and_headers(llm: FakeLLM, client: AsyncOpenAI) -> None:
    resp = await client.chat.completions.create(
        model="deepseek-chat",
        messages=[{"role": "system", "content": "你是伙伴"}, {"role": "user", "content": "在吗"}],
    )
    assert resp.choices[0].message.content == "好的，我在听。"
    assert resp.model == "deepseek-chat" and resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None
    assert resp.usage.total_tokens == len("你是伙伴\n在吗") // 2 + len("好的，我在听。") // 2
    assert llm.headers[0]["Authorization"] == "Bearer sk-test"
    assert llm.request_text(llm.requests[0]) == "你是伙伴\n在吗"
    assert llm.chat_requests() == llm.requests and llm.json_requests() == []


async def test_json_mode_and_queues(llm: FakeLLM, client: AsyncOpenAI) -> None:
    async def ask(text: str, json_mode: bool = False) -> str | None:
        resp = await client.chat.completions.create(
            model="deepseek-chat",
            messages=[{"role": "user", "content": text}],
            response_format={"type": "json_object"} if json_mode else {"type": "text"},
        )
        return resp.choices[0].message.content

    assert await ask("提取记忆，输出 json", json_mode=True) == '{"memories": []}'
    llm.queue_chat("一", "二")
    llm.queue_json('{"memories": ["喜欢猫"]}')
    assert [await ask("a"), await ask("b"), await ask("c")] == ["一", "二", "好的，我在听。"]
    assert await ask("d json", json_mode=True) == '{"memories": ["喜欢猫"]}'
    llm.set_chat_reply(lambda body: "echo:" + llm.request_text(body))
    assert await ask("e") == "echo:e"
    assert len(llm.json_requests()) == 2 and len(llm.chat_requests()) == 4
    assert len(await llm.wait_for_requests(2, predicate=llm.is_json_mode, timeout=0.1)) == 2
    with pytest.raises(AssertionError, match="expected >= 9"):
        await llm.wait_for_requests(9, timeout=0.05)


async def test_failures_delays_and_broken_bodies(llm: FakeLLM, client: AsyncOpenAI) -> None:
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
    llm.fail_next(status=500)
    with pytest.raises(openai.InternalServerError) as info:
        await client.chat.completions.create(model="deepseek-chat", messages=messages)
    assert info.value.status_code == 500
    llm.fail_next(status=429)
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="deepseek-chat", messages=messages)

    llm.delay_next(1.5)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model="deepseek-chat", messages=messages, timeout=0.2)
    assert time.monotonic() - started < 1.0

    llm.blank_next()
    resp = await client.chat.completions.create(model="deepseek-chat", messages=messages)
    assert resp.choices[0].message.content == ""
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="deepseek-chat", messages=messages, stream=True)
    assert len(llm.requests) == 5


async def test_raw_body_and_models(llm: FakeLLM, client: AsyncOpenAI) -> None:
    llm.raw_next("<html>502 Bad Gateway</html>")
    messages: list[openai.types.chat.ChatCompletionMessageParam] = [{"role": "user", "content": "x"}]
    result = await client.chat.completions.create(model="deepseek-chat", messages=messages)
    # The SDK does not raise on a non-JSON 200: it hands back the raw text instead of a ChatCompletion.
    assert result == "<html>502 Bad Gateway</html>"  # type: ignore[comparison-overlap]
    # With a JSON content type the broken body escapes as a bare JSONDecodeError, not an openai.APIError.
    llm.raw_next("not json", content_type="application/json")
    with pytest.raises(json.JSONDecodeError):
        await client.chat.completions.create(model="deepseek-chat", messages=messages)
    assert [m.id async for m in client.models.list()] == ["deepseek-chat"]
    async with AsyncOpenAI(api_key="sk-test", base_url=llm.base_url + "/v1", max_retries=0) as v1:
        resp = await v1.chat.completions.create(model="deepseek-chat", messages=messages)
    assert resp.choices[0].message.content == "好的，我在听。"


async def test_both_fakes_log_every_http_request_on_one_base(tg: FakeTelegram) -> None:
    async with FakeLLM(api_key="sk-right") as llm:
        async with AsyncOpenAI(api_key="sk-wrong", base_url=llm.base_url, max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()
        assert llm.http_log == [("GET", "/models")]
    bot = make_bot(tg, token="123456:WRONG")
    try:
        with pytest.raises(TelegramUnauthorizedError):
            await bot.get_me()
    finally:
        await bot.session.close()
    assert tg.http_log == [("POST", "/bot123456:WRONG/getMe")]
