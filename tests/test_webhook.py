"""Webhook mode: ``python bot.py`` with ``WEBHOOK_URL`` takes updates Telegram posts to it, refuses any
request without the secret token, and an operator can go back to polling without losing an update."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from companion.chat import texts
from companion.config.settings import load_settings
from companion.core.errors import ConfigError
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.webhook import SECRET_HEADER
from tests.process import bot_env, start_bot, stop_bot
from tests.servers import free_port

USER, STRANGER = 6101, 6102


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm



def update_from(user: int, text: str, update_id: int) -> dict[str, object]:
    chat = {"id": user, "type": "private", "first_name": "x"}
    return {"update_id": update_id, "message": {"message_id": update_id, "date": 1_700_000_000, "chat": chat,
                                                 "from": {"id": user, "is_bot": False, "first_name": "x"},
                                                 "text": text}}


async def test_webhook_mode_answers_checks_the_secret_and_hands_back_to_polling(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    llm.set_chat_reply("嗯嗯，我在呢。")
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/hook"
    env = bot_env(tg, llm, tmp_path, WEBHOOK_URL=url, WEBHOOK_PORT=str(port), WEBAPP_URL="https://b.example/board")
    proc = await start_bot(env, tmp_path)
    try:
        registered = await tg.wait_for_call("setWebhook", timeout=90)
        secret = str(registered["secret_token"])
        assert registered["url"] == url
        assert secret and tg.token.split(":")[1] not in secret, "the secret must not be the bot token"

        tg.push_text(USER, "/start_aiGF")
        assert (await tg.wait_for_messages(USER, 1, timeout=20))[0]["text"] == texts.GREETING_NEW
        tg.push_text(USER, "今天好累")
        assert (await tg.wait_for_messages(USER, 2, timeout=20))[1]["text"] == "嗯嗯，我在呢。"
        assert not [c for c in tg.calls if c[0].lower() == "getupdates"], "webhook mode must not poll"

        # Anyone can reach the URL; only Telegram knows the secret.
        async with aiohttp.ClientSession() as session:
            for headers in ({}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: secret[:-1]}):
                async with session.post(url, json=update_from(STRANGER, "/start_aiGF", 9001),
                                        headers=headers) as response:
                    assert response.status == 401
            async with session.post(url, json=update_from(STRANGER, "/start_aiGF", 9002),
                                    headers={SECRET_HEADER: secret}) as response:
                assert response.status == 200  # the control: the same request with the secret is taken
            # The memory board shares the webhook's server: its page, and its API only for Telegram's signature.
            async with session.get(f"http://127.0.0.1:{port}/board/") as response:
                assert response.status == 200 and "记忆面板" in await response.text()
            async with session.get(f"http://127.0.0.1:{port}/board/api/board") as response:
                assert response.status == 401
        assert (await tg.wait_for_messages(STRANGER, 1, timeout=20))[0]["text"] == texts.GREETING_NEW
    finally:
        output = await stop_bot(proc)
    assert tg.token not in output and secret not in output, "a secret reached the log"

    # Stopped, the webhook stays registered: Telegram holds what users send meanwhile.
    assert tg.webhook.url == url
    tg.push_text(USER, "你还在吗")
    await asyncio.sleep(0.5)
    assert "Connection failed" in tg.webhook.info().get("last_error_message", "")

    # Back to polling: the webhook is removed and the held message is answered, once.
    env.pop("WEBHOOK_URL")
    proc = await start_bot(env, tmp_path)
    try:
        await tg.wait_for_call("deleteWebhook", timeout=90)
        sent = await tg.wait_for_messages(USER, 3, timeout=30)
        assert sent[2]["text"] == "嗯嗯，我在呢。"
        await asyncio.sleep(0.5)
        assert len(tg.sent_messages(USER)) == 3
        assert tg.webhook.url == ""
    finally:
        await stop_bot(proc)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("webhook_url", "telegram.example.com/hook", "WEBHOOK_URL"),
    ("webhook_url", "ftp://example.com/hook", "WEBHOOK_URL"),
    ("webhook_secret", "has space", "WEBHOOK_SECRET"),
    ("webhook_secret", "x" * 257, "WEBHOOK_SECRET"),
    ("webhook_port", "0", "WEBHOOK_PORT"),
])
def test_bad_webhook_settings_stop_with_one_line(key: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        overrides: dict[str, object] = {key: value}
        load_settings(None, **overrides)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_derived_secret_is_stable_per_bot_and_differs_between_bots() -> None:
    one = load_settings(telegram_bot_token="1:AAA", webhook_url="https://bot.example.com/hook")
    same = load_settings(telegram_bot_token="1:AAA", webhook_url="https://other.example.com/x")
    other = load_settings(telegram_bot_token="2:BBB", webhook_url="https://bot.example.com/hook")
    assert one.webhook_token() == same.webhook_token() != other.webhook_token()
    assert one.webhook_path == "/hook"
    chosen = load_settings(telegram_bot_token="1:AAA", webhook_secret="my-Secret_1")
    assert chosen.webhook_token() == "my-Secret_1"
