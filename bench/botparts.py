"""``python -m bench bot --parts``: the CPU one bot turn spends in each of its parts, measured one part
at a time in this process against the fake servers running in another (so their CPU is not counted).

``time.process_time`` covers every thread of the process, so SQLite work in aiosqlite's thread counts.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiogram import Bot, Dispatcher
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.types import Update

from bench.botdriver import serve_main
from bench.brain import REPLIES
from bench.script_zh import TURNS
from companion.chat.prompt import render_reference
from companion.config.settings import Settings
from companion.core.models import MemoryDraft, Scope, Turn
from companion.core.timeutil import utcnow
from companion.llm.client import LLMClient, Message
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from handlers import build_router
from handlers.order import NoState, UserOrder

HISTORY_TURNS = (0, 5, 10)  # the bot sends up to HISTORY_TURNS=10 past exchanges with every reply call


async def cpu_ms(call: Callable[[], Awaitable[object]], samples: int) -> float:
    for _ in range(5):  # warm up connections and caches
        await call()
    started = time.process_time()
    for _ in range(samples):
        await call()
    return round((time.process_time() - started) / samples * 1000, 3)


def reply_messages(history: int) -> list[Message]:
    messages: list[Message] = [{"role": "system", "content": "你是「小伴」，用户的温柔、真诚的聊天伙伴。" * 12}]
    for n in range(history):
        messages += [{"role": "user", "content": TURNS[n]}, {"role": "assistant", "content": REPLIES[n % 8]}]
    return [*messages, {"role": "user", "content": TURNS[history]}]


def _chat_call(llm: LLMClient, messages: list[Message]) -> Callable[[], Awaitable[str]]:
    return lambda: llm.chat(messages, purpose="reply")


async def _engine_turn_ms(samples: int) -> float:
    """A turn's open and context + render_reference + note_turn for a user with 100 memories: the engine's share."""
    with tempfile.TemporaryDirectory(prefix="bench-parts-") as tmp:
        engine = await open_engine(Settings(_env_file=None, data_dir=Path(tmp)),  # type: ignore[call-arg]
                                         KeywordExtractor())
        try:
            scope, now = Scope(1), utcnow()
            drafts = [MemoryDraft(event=text, keywords=[], importance=60) for text in TURNS[:100]]
            await engine.remember(scope, drafts, now)
            texts = iter(TURNS * (samples // len(TURNS) + 2))

            async def turn() -> None:
                text = next(texts)
                context = await (await engine.open_turn(scope)).context(text, now, turn=1, cooldown={})
                render_reference(context, now, engine.config.tz)
                await engine.note_turn(scope, Turn(user=text, reply="嗯嗯", at=now))

            return await cpu_ms(turn, samples)
        finally:
            await engine.close()


class _Active:
    """``ChatService`` as ``on_text`` sees it for a user in companion mode."""

    async def active(self, scope: Scope) -> bool:
        return True


class _Held:
    """A buffer that keeps nothing: the part measured ends where the turn's own work begins."""

    def push(self, key: object, text: str, flush: object) -> None:
        pass


async def _dispatch_ms(bot: Bot, samples: int) -> float:
    """aiogram's dispatch of a private text through the bot's routers and middlewares to ``on_text``."""
    dispatcher = Dispatcher(chat=_Active(), buffer=_Held(), storage=NoState(), events_isolation=UserOrder())
    dispatcher.include_router(build_router())
    updates = iter(Update.model_validate(
        {"update_id": n, "message": {"message_id": n, "date": 1_700_000_000, "text": TURNS[n % len(TURNS)],
                                     "chat": {"id": 1 + n % 50, "type": "private", "first_name": "A"},
                                     "from": {"id": 1 + n % 50, "is_bot": False, "first_name": "A"}}},
        context={"bot": bot}) for n in range(samples + 10))
    return await cpu_ms(lambda: dispatcher.feed_update(bot, next(updates)), samples)


async def measure_parts(samples: int = 200) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    server = context.Process(target=serve_main, args=(there,), name="bench-parts-server", daemon=True)
    server.start()
    try:
        if not await asyncio.to_thread(here.poll, 60):
            raise TimeoutError("the fake servers did not start")
        info = here.recv()
        llm = LLMClient(api_key="sk-bench", base_url=info["llm"], model="deepseek-chat", max_retries=0)
        bot = Bot(info["token"], session=AiohttpSession(api=TelegramAPIServer.from_base(info["telegram"])))
        try:
            report: dict[str, Any] = {"llm_reply_call_ms": {}}
            for history in HISTORY_TURNS:
                report["llm_reply_call_ms"][f"{history} past turns"] = await cpu_ms(
                    _chat_call(llm, reply_messages(history)), samples)
            report["send_message_ms"] = await cpu_ms(lambda: bot.send_message(1, REPLIES[0]), samples)
            report["send_chat_action_ms"] = await cpu_ms(lambda: bot.send_chat_action(1, "typing"), samples)
            report["dispatch_ms"] = await _dispatch_ms(bot, samples)
            report["engine_turn_ms"] = await _engine_turn_ms(samples)
        finally:
            await llm.close()
            await bot.session.close()
        here.send("stop")
    finally:
        server.join(10)
        if server.is_alive():
            server.terminate()
    return report


def format_parts(report: dict[str, Any]) -> str:
    lines = ["CPU per part of a turn, in this process (ms):"]
    lines += [f"  LLM reply call, {name}: {ms}" for name, ms in report["llm_reply_call_ms"].items()]
    lines += [f"  sendMessage: {report['send_message_ms']}", f"  sendChatAction: {report['send_chat_action_ms']}",
              f"  aiogram dispatch of a private text to its handler: {report['dispatch_ms']}",
              f"  engine (context, prompt, queue the turn), 100 memories: {report['engine_turn_ms']}"]
    return "\n".join(lines)
