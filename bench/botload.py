"""``python -m bench bot``: the real bot under many concurrent users, with instant fake backends.

This process runs the bot as ``bot.py run`` builds it (aiogram dispatcher and router, message buffer,
ChatService, real engine on a fresh SQLite file, the real openai client). A second process runs the
fake Telegram server, the fake LLM and the simulated users, so the fakes do not eat the bot's CPU: on
a 2-core machine the bot gets one core, as it would in production with remote backends.

Each simulated user is a closed loop: /start_aiGF, then one message at a time, each sent when the
answer to the previous one arrived. With QUIET_SECONDS=0 every message is its own turn, so every
message must get exactly one answer.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import tempfile
from dataclasses import asdict
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.botdriver import BotConfig, cpu_seconds, driver_main
from bench.timing import GcWatch, machine, thread_cpu, thread_cpu_since
from bot import build_bot
from bot import companion as companion_service
from companion.config.runtime import settle_heap
from companion.config.settings import Settings
from companion.core.usage import UsageTotals


def bot_settings(root: Path, info: dict[str, str]) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, data_dir=root / "data", backup_dir=root / "backups", quiet_seconds=0,
        telegram_bot_token=SecretStr(info["token"]), telegram_api_base=info["telegram"],
        llm_api_key=SecretStr("sk-bench"), llm_base_url=info["llm"], llm_max_retries=0,
    )


async def _receive(conn: Connection, timeout: float, driver: multiprocessing.process.BaseProcess) -> Any:
    """The driver's next message; fails fast when the driver died instead of waiting out the timeout."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await asyncio.to_thread(conn.poll, 0.5):
        if not driver.is_alive():
            raise RuntimeError(f"the driver process exited with code {driver.exitcode}")
        if loop.time() > deadline:
            raise TimeoutError(f"the driver process did not answer within {timeout} s")
    return conn.recv()


ECHO_ANSWER = "嗯嗯，我在呢。今天过得怎么样？有什么想跟我说的吗？"  # a companion-length answer


async def _measured(conn: Connection, driver: multiprocessing.process.BaseProcess,
                    config: BotConfig) -> dict[str, Any]:
    """Tell the driver to go and wait for its report, adding the bot's CPU and garbage collections meanwhile."""
    cpu, threads = cpu_seconds(), thread_cpu()
    with GcWatch() as collected:
        conn.send("go")
        report: dict[str, Any] = await _receive(conn, 120 + config.users * config.messages * 0.1, driver)
    report["bot_cpu_s"] = round(cpu_seconds() - cpu, 2)
    report["bot_cpu_by_thread_s"] = thread_cpu_since(threads)
    report["bot_cpu_ms_per_message"] = round(report["bot_cpu_s"] * 1000 / max(report["answered"], 1), 2)
    report["gc"] = collected.report()
    return report


BOTS = ("companion", "plain", "echo")


async def run_bot_bench(config: BotConfig, *, bot: str = "companion") -> dict[str, Any]:
    """The bot under load. ``bot`` "echo": an aiogram bot that answers every message at once with the same
    client, session and dispatcher but no memory and no model (the limit of this path); "plain": a chat bot
    without memory that does per message what any bot on the product's libraries must (the persona and the
    chat's last turns to the model through the openai SDK, "typing…", the answer sent), the floor under the
    companion's memory work."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    driver = context.Process(target=driver_main, args=(there, config), name="bench-bot-driver", daemon=True)
    driver.start()
    try:
        info = await _receive(here, 60, driver)
        with tempfile.TemporaryDirectory(prefix="bench-bot-") as tmp:
            serve = {"companion": _serve, "plain": _serve_plain, "echo": _serve_echo}[bot]
            report = await serve(here, driver, bot_settings(Path(tmp), info), config)
        here.send("stop")
        report.update(await _receive(here, 30, driver))
    finally:
        driver.join(10)
        if driver.is_alive():
            driver.terminate()
    report["config"] = asdict(config)
    report["event_loop"] = type(asyncio.get_running_loop()).__module__.split(".")[0]
    report["bot"] = bot
    report["machine"] = machine()
    return report


async def _serve(conn: Connection, driver: multiprocessing.process.BaseProcess, settings: Settings,
                 config: BotConfig) -> dict[str, Any]:
    """``run_bot`` without the maintenance scheduler (its jobs run at night, not in this window)."""
    async with companion_service(settings) as (chat, parts):
        calls = UsageTotals()
        chat.llm.usage_sinks.append(calls)  # beside the store's usage log, which the bot keeps
        bot, dispatcher, buffer = build_bot(settings, chat, parts)
        settle_heap()  # as bot.py does once start-up is done
        polling = asyncio.create_task(dispatcher.start_polling(bot, handle_signals=False, close_bot_session=False))
        try:
            report = await _measured(conn, driver, config)
            report["llm_calls"] = calls.calls()
        finally:
            await dispatcher.stop_polling()
            await polling
            await buffer.close()
            await bot.session.close()
    report["llm_calls_final"] = calls.calls()
    return report


async def _serve_echo(conn: Connection, driver: multiprocessing.process.BaseProcess, settings: Settings,
                      config: BotConfig) -> dict[str, Any]:
    from aiogram import Dispatcher
    from aiogram.types import Message

    from handlers import build_client

    assert settings.telegram_bot_token is not None
    bot = build_client(settings.telegram_bot_token.get_secret_value(), settings.telegram_api_base)
    dispatcher = Dispatcher()

    @dispatcher.message()
    async def answer(message: Message) -> None:
        await message.answer(ECHO_ANSWER)

    settle_heap()

    polling = asyncio.create_task(dispatcher.start_polling(bot, handle_signals=False, close_bot_session=False))
    try:
        report = await _measured(conn, driver, config)
        report["llm_calls_final"] = {}
    finally:
        await dispatcher.stop_polling()
        await polling
        await bot.session.close()
    return report


async def _serve_plain(conn: Connection, driver: multiprocessing.process.BaseProcess, settings: Settings,
                       config: BotConfig) -> dict[str, Any]:
    from collections import deque

    from aiogram import Dispatcher
    from aiogram.types import Message

    from companion.chat.prompt import render_system_prompt
    from companion.llm.client import Message as Said
    from companion.ops.engine_assembly import build_llm
    from handlers import build_client
    from handlers.delivery import deliver, typing

    assert settings.telegram_bot_token is not None
    bot = build_client(settings.telegram_bot_token.get_secret_value(), settings.telegram_api_base)
    llm = build_llm(settings)
    calls = UsageTotals()
    llm.usage_sinks.append(calls)
    dispatcher = Dispatcher(disable_fsm=True)
    system: Said = {"role": "system", "content": render_system_prompt()}
    history: dict[int, deque[Said]] = {}

    @dispatcher.message()
    async def answer(message: Message) -> None:
        said = history.setdefault(message.chat.id, deque(maxlen=2 * 10))  # the companion's 10 turns
        asked: Said = {"role": "user", "content": message.text or ""}
        async with typing(bot, message.chat.id):
            reply = await llm.chat([system, *said, asked])
        said.extend((asked, {"role": "assistant", "content": reply}))
        await deliver(bot, message.chat.id, reply)

    settle_heap()
    polling = asyncio.create_task(dispatcher.start_polling(bot, handle_signals=False, close_bot_session=False))
    try:
        report = await _measured(conn, driver, config)
        report["llm_calls_final"] = calls.calls()
    finally:
        await dispatcher.stop_polling()
        await polling
        await bot.session.close()
        await llm.close()
    return report


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median throughput, carrying a summary of every run."""
    ordered = sorted(runs, key=lambda r: float(r["messages_per_s"]))
    report = dict(ordered[len(ordered) // 2])
    keys = ("messages_per_s", "latency_ms", "exactly_one_answer_each", "bot_cpu_ms_per_message")
    report["runs"] = [{k: run[k] for k in keys} for run in runs]
    report["exactly_one_answer_each"] = all(run["exactly_one_answer_each"] for run in runs)
    return report


BASELINES = {
    "plain": "plain baseline (persona + last turns through the openai SDK, typing, send; no memory)",
    "echo": "echo baseline (aiogram, no memory, no model)",
}


def format_baseline(bot: dict[str, Any], baseline: dict[str, Any], kind: str = "echo") -> str:
    ratio = float(bot["messages_per_s"]) / max(float(baseline["messages_per_s"]), 1e-9)
    return (f"{BASELINES[kind]}: {baseline['messages_per_s']} messages/s, "
            f"{baseline['bot_cpu_ms_per_message']} ms CPU per message; the companion reaches {ratio:.0%} of it")


def format_bot(report: dict[str, Any]) -> str:
    lat = report["latency_ms"]
    ok = "yes" if report["exactly_one_answer_each"] else "NO"
    return "\n".join([
        f"{report['config']['users']} users x {report['config']['messages']} messages: "
        f"{report['answered']}/{report['messages']} answered in {report['seconds']} s",
        f"throughput: {report['messages_per_s']} messages/s (target >= 300)",
        f"latency (message pushed -> answer sent), ms: p50 {lat['p50']}, p95 {lat['p95']}, p99 {lat['p99']}",
        f"exactly one answer per message: {ok} (missing {report['missing']}, users with extra answers "
        f"{report['users_with_extra_answers']}, failed answers {report['failed_answers']})",
        f"bot CPU: {report['bot_cpu_s']} s ({report['bot_cpu_ms_per_message']} ms per message); "
        f"driver+fakes CPU: {report['driver_cpu_s']} s",
        f"bot CPU by thread, s: {report.get('bot_cpu_by_thread_s', {})} (the event loop's bounds the throughput)",
        f"LLM calls by purpose: {report['llm_calls_final']}",
        f"Telegram calls by method: {report.get('telegram_calls', {})}; event loop: {report.get('event_loop')}",
        f"garbage collections (young, middle, full): {report['gc']['collections']}, {report['gc']['seconds']} s",
        *(f"run {n + 1}: {run['messages_per_s']} messages/s, p95 {run['latency_ms']['p95']} ms"
          for n, run in enumerate(report.get("runs", [])) if len(report["runs"]) > 1),
    ])
