"""``python -m bench path``: one private message followed through the bot's own code, from aiogram's
dispatch of the update to the reply's ``sendMessage``: which project files it passes and how often a call
goes down the layers (``tests/test_layers.py``), each such call being a return to a higher layer.

The bot is the real one (``bot.companion`` and ``bot.build_bot``: aiogram, the engine on a SQLite file, the
openai SDK) against the fake Telegram and model servers, which run on a thread of their own so the profile
(``sys.setprofile``, this thread only) sees the bot alone. A user in companion mode with a few memories sends
some messages first, so the measured one is an ordinary turn (index loaded, conversation going). Run it on
two commits to compare them: it imports only what both have.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from aiogram.types import Update

from bench.brain import ScriptedModel
from bench.script_zh import FACTS
from companion.config.settings import Settings
from tests.fakes import FakeLLM, FakeTelegram
from tests.test_layers import LAYERS, module_name, package_of

ROOT = Path(__file__).resolve().parent.parent
USER = 4242
WARM_UP = ("我养了一只柯基叫豆豆", "今天下班好累", "晚饭吃了面条")
SETTLED = "嗯嗯"
MEASURED = "豆豆今天又把拖鞋咬坏了"


@dataclass
class Trace:
    """What the profile saw: each project function called, by file, and each call down the layers."""

    files: set[str] = field(default_factory=set)
    down: set[tuple[str, str]] = field(default_factory=set)  # (caller, callee) functions, callee lower

    def report(self) -> dict[str, Any]:
        layers: dict[str, list[str]] = {}
        for path in sorted(self.files):
            layers.setdefault(str(layer_of(path)), []).append(path)
        return {"files": len(self.files), "returns_to_a_higher_layer": len(self.down),
                "file_pairs_down": len({(a.split(":")[0], b.split(":")[0]) for a, b in self.down}),
                "files_by_layer": layers, "calls_down": sorted(f"{a} -> {b}" for a, b in self.down)}


def project_file(filename: str) -> str | None:
    """The path of a file of the bot's own code, relative to the project; None for libraries, tests, bench."""
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] in ("tests", "bench", ".venv") or relative.suffix != ".py":
        return None
    return relative.as_posix()


def layer_of(path: str) -> float:
    package = package_of(module_name(ROOT / path))
    return LAYERS[package] if package is not None else -1.0


@contextmanager
def profiled(trace: Trace) -> Iterator[None]:
    names: dict[Any, str | None] = {}

    def own(code: Any) -> str | None:
        if code not in names:
            path = project_file(code.co_filename)
            names[code] = None if path is None else f"{path}:{code.co_qualname}"
        return names[code]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = own(frame.f_code)
        if callee is None:
            return
        trace.files.add(callee.split(":")[0])
        caller_frame = frame.f_back
        while caller_frame is not None and own(caller_frame.f_code) is None:
            caller_frame = caller_frame.f_back  # through aiogram's and asyncio's frames to the project's
        if caller_frame is None:
            return
        caller = own(caller_frame.f_code)
        assert caller is not None
        if layer_of(callee.split(":")[0]) < layer_of(caller.split(":")[0]):
            trace.down.add((caller, callee))

    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(None)


class Servers:
    """The fake Telegram and model servers on a thread and event loop of their own."""

    def __init__(self) -> None:
        self.ready: Future[tuple[FakeTelegram, FakeLLM]] = Future()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="bench-path-fakes")

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with FakeTelegram() as tg, FakeLLM() as llm:
            ScriptedModel(FACTS).install(llm)
            self.ready.set_result((tg, llm))
            await self._stop.wait()

    def __enter__(self) -> tuple[FakeTelegram, FakeLLM]:
        self._thread.start()
        return self.ready.result(timeout=60)

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def _update(n: int, text: str) -> Update:
    return Update.model_validate({"update_id": n, "message": {
        "message_id": n, "date": 1_700_000_000 + n, "text": text,
        "chat": {"id": USER, "type": "private", "first_name": "A"},
        "from": {"id": USER, "is_bot": False, "first_name": "A"}}})


async def _answered(tg: FakeTelegram, count: int, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        # The fake server answers on another thread's event loop: nothing of it can be awaited from this one.
        while len(tg.sent_messages(USER)) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def follow(embeddings: str) -> dict[str, Any]:
    from bot import build_bot, companion

    with Servers() as (tg, llm), tempfile.TemporaryDirectory(prefix="bench-path-") as tmp:
        values: dict[str, object] = {
            "data_dir": Path(tmp), "backup_dir": Path(tmp) / "backups", "telegram_bot_token": tg.token,
            "telegram_api_base": tg.base_url, "llm_api_key": "sk-bench", "llm_base_url": llm.base_url,
            "quiet_seconds": 0, "embeddings": embeddings,
            # No extraction in the measured turn: its countdown is random and would run it in some runs only.
            "extract_every_min": 50, "extract_every_max": 50}
        settings = Settings(_env_file=None, **values)  # type: ignore[arg-type,call-arg]
        async with companion(settings) as (chat, parts):
            bot, dispatcher, _ = build_bot(settings, chat, parts)
            await parts.engine.ready()
            try:
                await dispatcher.feed_update(bot, _update(1, "/start_aiGF"))
                await _answered(tg, 1)
                for n, text in enumerate(WARM_UP, start=2):
                    sent = len(tg.sent_messages(USER))
                    await dispatcher.feed_update(bot, _update(n, text))
                    await _answered(tg, sent + 1)
                await chat.drain()
                # One more turn after the background work settled, so the measured one is an ordinary turn
                # (not the first after an extraction, which rebuilds some caches).
                sent = len(tg.sent_messages(USER))
                await dispatcher.feed_update(bot, _update(len(WARM_UP) + 2, SETTLED))
                await _answered(tg, sent + 1)
                await chat.drain()
                sent = len(tg.sent_messages(USER))
                trace = Trace()
                with profiled(trace):
                    await dispatcher.feed_update(bot, _update(len(WARM_UP) + 3, MEASURED))
                    await _answered(tg, sent + 1)
            finally:
                await bot.session.close()
    return trace.report()


def run_command(args: argparse.Namespace) -> int:
    report = asyncio.run(follow(args.embeddings))
    if args.json:
        args.json.write_text(json.dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    print(f"one private message, dispatch to sendMessage: {report['files']} project files, "
          f"{report['returns_to_a_higher_layer']} returns to a higher layer "
          f"({report['file_pairs_down']} file pairs)")
    if args.list:
        for layer, files in sorted(report["files_by_layer"].items(), key=lambda kv: float(kv[0])):
            print(f"  layer {layer}: {', '.join(files)}")
        print("\n".join(f"  {line}" for line in report["calls_down"]))
    return 0
