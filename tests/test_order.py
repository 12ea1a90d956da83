"""aiogram's events isolation with ``handlers.order``: one user's updates in a chat run in the order aiogram
started them, other users' meanwhile. The bot's own ordering, end to end: tests/test_handlers.py (a text
and the /stop_aiGF after it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiogram import Bot, Dispatcher, Router
from aiogram.fsm.context import FSMContext
from aiogram.types import CallbackQuery, Message, Update

from handlers.order import NoState, UserOrder

GROUP = -100777


def update(n: int, user: int, chat: int | None = None, *, press: bool = False) -> Update:
    where = {"id": chat or user, "type": "private" if chat is None else "supergroup", "title": "g"}
    sender = {"id": user, "is_bot": False, "first_name": "A"}
    said = {"message_id": n, "date": 0, "chat": where, "from": sender, "text": f"m{n}"}
    if press:
        return Update.model_validate({"update_id": n, "callback_query": {
            "id": str(n), "from": sender, "chat_instance": "c", "data": f"m{n}", "message": said}})
    return Update.model_validate({"update_id": n, "message": said})


class Recorder:
    """Handlers that note when each update starts and ends; ``gates[text]`` holds that update until set."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.router = Router()
        self.router.message.register(self.on_message)
        self.router.callback_query.register(self.on_press)

    async def on_message(self, message: Message) -> None:
        await self.handle(message.text or "")

    async def on_press(self, query: CallbackQuery) -> None:
        await self.handle(query.data or "")

    async def handle(self, text: str) -> None:
        self.log.append(f"{text}+")
        if text == "m1" and "m1" not in self.gates:
            raise RuntimeError("handler failed")
        if text in self.gates:
            await self.gates[text].wait()
        await asyncio.sleep(0)
        self.log.append(f"{text}-")


@pytest.fixture
async def bot() -> Any:
    bot = Bot("42:TEST")
    yield bot
    await bot.session.close()


def dispatcher(router: Router) -> Dispatcher:
    dp = Dispatcher(storage=NoState(), events_isolation=UserOrder())
    dp.include_router(router)
    return dp


async def until(recorder: Recorder, mark: str) -> None:
    for _ in range(200):
        if mark in recorder.log:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{mark} never came: {recorder.log}")


async def test_one_users_updates_wait_in_order_while_other_users_go_on(bot: Bot) -> None:
    recorder = Recorder()
    recorder.gates["m1"] = asyncio.Event()
    dp = dispatcher(recorder.router)
    # As aiogram's polling starts one task per update of a batch, in update order.
    tasks = [asyncio.create_task(dp.feed_update(bot, u)) for u in (
        update(1, 7), update(2, 7), update(3, 8), update(4, 7, GROUP), update(5, 7), update(6, 7, press=True))]
    await until(recorder, "m4-")  # another user, and the same user in another chat, are not held up
    await until(recorder, "m3-")
    assert "m2+" not in recorder.log and "m5+" not in recorder.log and "m6+" not in recorder.log
    recorder.gates["m1"].set()
    await asyncio.gather(*tasks)
    mine = [entry for entry in recorder.log if entry[:2] in ("m1", "m2", "m5", "m6")]
    assert mine == ["m1+", "m1-", "m2+", "m2-", "m5+", "m5-", "m6+", "m6-"]  # a button press queues too


async def test_a_users_next_update_runs_once_the_last_one_ended_even_if_it_failed(bot: Bot) -> None:
    recorder = Recorder()  # without a gate for it, m1's handler fails
    dp = dispatcher(recorder.router)
    with pytest.raises(RuntimeError):
        await dp.feed_update(bot, update(1, 7))
    await asyncio.wait_for(dp.feed_update(bot, update(2, 7)), 1)
    assert recorder.log == ["m1+", "m2+", "m2-"]


async def test_no_state_is_kept_and_keeping_some_fails_loudly(bot: Bot) -> None:
    seen: list[Any] = []

    async def keep(message: Message, state: FSMContext, raw_state: str | None) -> None:
        seen.append(raw_state)
        await state.set_state("waiting")

    router = Router()
    router.message.register(keep)
    dp = dispatcher(router)
    with pytest.raises(NotImplementedError, match="no handler keeps aiogram FSM state"):
        await dp.feed_update(bot, update(1, 7))
    assert seen == [None]
