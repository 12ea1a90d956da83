"""The Telegram client's session (handlers/session.py): JSON bodies against the fake Bot API, uploads still
as forms, network failures as aiogram's typed error."""

from __future__ import annotations

import socket

import pytest
from aiogram.exceptions import TelegramNetworkError
from aiogram.types import BufferedInputFile, InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions

from handlers import build_client
from tests.fakes import FakeTelegram

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
