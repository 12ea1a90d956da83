"""The Telegram client's session (handlers/client_session.py): JSON bodies against the fake Bot API, uploads still
as forms, network failures as aiogram's typed error, polling in batches under load."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from aiogram import Bot, Dispatcher
from aiogram.exceptions import ClientDecodeError, TelegramNetworkError
from aiogram.methods import GetUpdates
from aiogram.types import BufferedInputFile, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, Message

from companion.chat import texts
from handlers import build_client
from handlers.client_session import PacedPolling, readable_updates
from tests.fakes import FakeTelegram
from tests.support import USER, Live

CHAT = 4242


async def test_a_message_goes_as_one_json_body_and_arrives_whole() -> None:
    markup = InlineKeyboardMarkup(inline_keyboard=[[InlineKeyboardButton(text="忘掉", callback_data="f:1")]])
    async with FakeTelegram() as tg:
        bot = build_client(tg.token, tg.base_url)
        try:
            sent = await bot.send_message(CHAT, "你好，我记得你喜欢猫。", reply_markup=markup,
                                          link_preview_options=LinkPreviewOptions(is_disabled=True),
                                          disable_notification=False)
        finally:
            await bot.session.close()
    assert sent.text == "你好，我记得你喜欢猫。"
    assert tg.body_types == [("sendMessage", "application/json")]
    params = tg.calls[-1][1]
    assert params["chat_id"] == CHAT
    assert params["reply_markup"] == {"inline_keyboard": [[{"text": "忘掉", "callback_data": "f:1"}]]}
    assert params["link_preview_options"] == {"is_disabled": True}
    assert params["disable_notification"] is False  # a false flag is sent, as a form sends "false"
    assert "message_thread_id" not in params  # what is unset is left out, as a form leaves it out


async def test_an_upload_still_goes_as_a_multipart_form() -> None:
    async with FakeTelegram() as tg:
        bot = build_client(tg.token, tg.base_url)
        try:
            await bot.send_document(CHAT, BufferedInputFile("id,text\n1,猫\n".encode(), filename="memories.csv"),
                                    caption="导出")
        finally:
            await bot.session.close()
    assert tg.body_types == [("sendDocument", "multipart/form-data")]
    params = tg.calls[-1][1]
    assert params["caption"] == "导出"
    upload = params[params["document"].removeprefix("attach://")]  # aiogram attaches the file under a key
    assert upload["filename"] == "memories.csv"
    assert upload["content"] == "id,text\n1,猫\n".encode()


async def test_an_unreachable_server_is_a_network_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bot = build_client("42:TEST", f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(TelegramNetworkError):
            await bot.send_message(CHAT, "在吗")
    finally:
        await bot.session.close()


async def test_under_load_a_poll_waits_and_brings_what_arrived_meanwhile() -> None:
    async with FakeTelegram() as tg:
        bot = build_client(tg.token, tg.base_url, poll_pace=0.3)
        try:
            tg.push_text(CHAT, "第一条")
            first = await bot.get_updates(timeout=0)
            polled = asyncio.create_task(bot.get_updates(offset=first[-1].update_id + 1, timeout=1))
            await asyncio.sleep(0.1)  # during the pause: the second poll has not been sent yet
            assert [name for name, _ in tg.calls].count("getUpdates") == 1
            tg.push_text(CHAT, "第二条")
            tg.push_text(CHAT, "第三条")
            batch = await polled
            idle = await bot.get_updates(offset=batch[-1].update_id + 1, timeout=0)  # no pause: it brought some
            assert idle == []
            started = asyncio.get_running_loop().time()
            await bot.get_updates(offset=batch[-1].update_id + 1, timeout=0)  # after an empty poll: none
            assert asyncio.get_running_loop().time() - started < 0.25
        finally:
            await bot.session.close()
    assert [u.message.text for u in batch if u.message] == ["第二条", "第三条"]


async def test_a_stop_during_the_pause_still_confirms_the_updates_handled() -> None:
    """Telegram confirms a batch only with the next poll's offset: stopped in the pause, the bot still sends
    it, so the next start does not handle the batch again; what came meanwhile stays for that start."""
    async with FakeTelegram() as tg:
        bot = build_client(tg.token, tg.base_url, poll_pace=5.0)
        dispatcher = Dispatcher()
        seen: list[str] = []

        @dispatcher.message()
        async def answer(message: Message) -> None:
            seen.append(message.text or "")
            await message.answer("嗯")

        polling = asyncio.create_task(dispatcher.start_polling(bot, handle_signals=False, close_bot_session=False))
        try:
            tg.push_text(CHAT, "你好")
            await tg.wait_for_messages(CHAT, 1)
            await asyncio.sleep(0.2)  # the next poll is in its pause
            tg.push_text(CHAT, "还在吗")  # arrives during the pause, before the stop
            await dispatcher.stop_polling()
            await asyncio.wait_for(polling, 10)
        finally:
            await bot.session.close()
    assert seen == ["你好"]
    assert [u["message"]["text"] for u in tg.pending_updates] == ["还在吗"], "handled again at the next start"


@pytest.mark.parametrize("busy", [False, True])
async def test_a_stop_while_a_poll_is_out_sends_its_offset_again(busy: bool) -> None:
    """Cancelled with the poll's request still out (its connection being made, so Telegram may never have read
    the offset) or in the pause before it: the offset goes once more before the stop goes on."""
    sent: list[tuple[int | None, int | None]] = []
    stuck = asyncio.Event()

    async def make_request(bot: Any, method: Any) -> list[int]:
        sent.append((method.offset, method.timeout))
        if method.offset == 41:  # the poll before: it brought an update, so the next one pauses
            return [41]
        if method.timeout:  # the poll itself: never answered
            stuck.set()
            await asyncio.Event().wait()
        return []

    pacing = PacedPolling(pace=60.0)
    if busy:
        await pacing(make_request, None, GetUpdates(offset=41, timeout=10))  # type: ignore[arg-type]
        sent.clear()
    polling = asyncio.create_task(pacing(make_request, None, GetUpdates(offset=42, timeout=10)))  # type: ignore[arg-type]
    if busy:
        await asyncio.sleep(0.05)
    else:
        await stuck.wait()
    polling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await polling
    assert sent == ([(42, 0)] if busy else [(42, 10), (42, 0)])


@pytest.mark.parametrize("bad", [
    {"message": {"message_id": "not a number", "date": 0, "chat": {"id": USER, "type": "private"}}},
    {"callback_query": {"id": "1", "from": {"id": USER}, "chat_instance": "x"}},  # a user with no is_bot
])
async def test_an_unreadable_update_is_skipped_and_polling_goes_on(
        live: Live, bad: dict[str, Any], caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder) -> None:
    """One update aiogram cannot read made every poll fail, the offset never moved, and every later message
    waited behind it for ever. Now it is passed over with one line, and the next message is answered."""
    assert await live.say("/start_aiGF", 1) == texts.GREETING_NEW
    skipped = live.tg.push_update(bad)
    live.llm.set_chat_reply("我在呢")
    assert await live.say("在吗", 2) == "我在呢"
    for _ in range(200):  # the poll after the reply confirms everything up to the last message
        if not live.tg.pending_updates:
            break
        await asyncio.sleep(0.05)
    assert live.tg.pending_updates == []
    assert f"update {skipped} could not be read and is skipped" in caplog.text
    assert not [w for w in recwarn if "unknown update type" in str(w.message)], "aiogram's Bot-API-changed warning"


async def test_a_poll_answer_that_is_not_updates_still_fails_as_a_decoding_error() -> None:
    with pytest.raises(ClientDecodeError):
        readable_updates(Bot("1:a"), '{"ok": true, "result": [{"no_id": 1}]}')
