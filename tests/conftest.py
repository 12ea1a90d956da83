"""Fixtures shared by the whole suite: the fake OpenAI-compatible server, a real engine + chat rig on
a temporary SQLite file, and a store of every backend (PostgreSQL in a schema of its own per test, see
``tests/pgtest.py``). Helpers to build more of them live in ``tests/support.py``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from companion.chat.buffer import MessageBuffer
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import Scope
from companion.engine.tools import memory_tools
from companion.storage.base import MemoryStore
from companion.storage.factory import open_store, sqlite_url
from companion.storage.sqlite import SQLiteStore
from handlers import build_client, build_dispatcher
from handlers.commands import bot_commands
from tests.astrbot.venvs import BUILDS, astrbot_last, runs_astrbot, start, wanted
from tests.fakes import FakeLLM, FakeTelegram
from tests.pgtest import pg_schema, require_server
from tests.redistest import redis_keys
from tests.support import Live, Rig, close_rig, make_settings, open_rig
from tests.timed import require_faketime

# A test that is not about semantic recall runs on keywords whatever the environment says, so what it recalls does
# not hang on one model's cosines, and the bot processes it starts inherit that; the tests of the built-in model
# set EMBEDDINGS=auto themselves (tests/test_semantic_default.py). `EMBEDDINGS=auto pytest` runs them all with it.
os.environ.setdefault("EMBEDDINGS", "off")

# The kinds of test a developer may want to run (``pytest -m process``) or leave out (``-m "not process"``),
# by module: what a module needs is a property of the module, and a new one lands in the kind of its neighbours.
KINDS: dict[str, frozenset[str]] = {
    "process": frozenset({
        "test_admin", "test_astrbot_order", "test_backup_failures", "test_backup_stop", "test_console",
        "test_console_memory", "test_dblock", "test_dida_process", "test_e2e_groups", "test_e2e_memory",
        "test_e2e_month", "test_e2e_process", "test_e2e_time", "test_e2e_touches", "test_forget_atomic",
        "test_fuzz_recovery", "test_graceful_stop", "test_merge_process", "test_migrate", "test_resilience",
        "test_semantic_process", "test_startup", "test_webhook", "test_workers_process", "test_crash",
        "test_group_move_crash", "test_load", "test_outage", "test_telegram_faults", "test_queue_intake",
        "test_e2e_followups", "test_e2e_followups_workers", "test_board_browser",
    }),
    "browser": frozenset({"test_board_browser"}),
    "redis": frozenset({"test_workqueue", "test_workers_process", "test_e2e_followups_workers"}),
    "packaging": frozenset({"test_packaging", "test_makefile", "test_layers"}),
}
MARKERS = {
    "postgresql": "needs the PostgreSQL test server (tests/pgtest.py)",
    "redis": "needs the Redis test server (tests/redistest.py)",
    "process": "runs python bot.py (or another of the project's commands) as a process",
    "astrbot": "runs real AstrBot in its own virtualenv (tests/astrbot/venvs.py)",
    "packaging": "builds a wheel or a virtualenv, or reads the source tree as a whole",
    "browser": "drives Debian's headless Chromium through its chromedriver (tests/test_board_browser.py)",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its kinds; then order them for the workers (``make test`` keeps this order:
    ``--no-loadscope-reorder``): the slow kinds first, so the longest modules do not start last and hold the
    session up alone: real AstrBot's first when its virtualenvs are built (its modules are the longest), else
    last, so the virtualenvs build while the others run; then processes and packaging; then the rest."""
    for item in items:
        module = item.path.stem
        for kind, modules in KINDS.items():
            if module in modules:
                item.add_marker(kind)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "postgresql" in callspec.params.values():
            item.add_marker("postgresql")
        if runs_astrbot(item):
            item.add_marker("astrbot")
    slow = [item for item in items if item.get_closest_marker("process") or item.get_closest_marker("packaging")]
    first = set(map(id, slow))
    ordered = astrbot_last([*slow, *(item for item in items if id(item) not in first)])
    if all(venv.ready.exists() for venv in wanted(ordered)):
        ordered = sorted(ordered, key=lambda item: not runs_astrbot(item))  # stable: each part keeps its order
    items[:] = ordered


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start building the AstrBot virtualenvs the selected tests need (both at once, each in a process of
    its own), unless they are ready; the tests' fixtures wait for them (tests/astrbot/venvs.py)."""
    if not session.config.option.collectonly:
        for venv in wanted(session.items):
            start(venv)


def pytest_sessionfinish() -> None:
    """A build no test waited for (the session stopped early, ``-x``) would outlive it: stop it."""
    for build in BUILDS.values():
        build.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long each background build took and how long the tests waited for it: the build's cost."""
    for build in BUILDS.values():
        terminalreporter.write_line(build.summary())


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests on PostgreSQL (marked, or parametrized with ``postgresql``) skip together, with one reason
    and one location, when there is no server; in CI they fail."""
    callspec = getattr(item, "callspec", None)
    if item.get_closest_marker("postgresql") or (callspec is not None and "postgresql" in callspec.params.values()):
        require_server()


# The backends the store contract and the engine tests that take ``any_store`` run on.
STORE_BACKENDS = ("sqlite", "memory", "postgresql")


@pytest.fixture(params=STORE_BACKENDS)
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """Every backend, opened as a host opens it (``open_store``); PostgreSQL in a fresh schema, dropped after."""
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "postgresql":
            url = await stack.enter_async_context(pg_schema())
        else:
            url = sqlite_url(tmp_path / "m.sqlite3") if request.param == "sqlite" else f"{request.param}://"
        opened = await open_store(url)
        stack.push_async_callback(opened.close)
        yield opened


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """The SQLite store alone, for what only it has (its connections, its usage log's shared writes)."""
    opened = await open_store(sqlite_url(tmp_path / "store.sqlite3"))
    assert isinstance(opened, SQLiteStore)
    yield opened
    await opened.close()


@pytest.fixture
def store(any_store: MemoryStore) -> MemoryStore:
    """The store contract suites' store: every backend (a module with a ``store`` fixture of its own uses
    that instead)."""
    return any_store


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    """A Redis key prefix of this test's own (tests/redistest.py), its keys deleted after; skips without a
    server (fails with CI=true)."""
    async with redis_keys() as prefix:
        yield prefix


@pytest.fixture
async def timed_servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    """The fake Telegram and LLM servers for a ``python bot.py`` whose clock is moved (tests/timed.py); skips
    without libfaketime (fails with CI=true)."""
    require_faketime()
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        yield llm


@pytest.fixture
async def rig(fake_llm: FakeLLM, tmp_path: Path) -> AsyncIterator[Rig]:
    opened = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        yield opened
    finally:
        await close_rig(opened)


@pytest.fixture
async def live(tmp_path: Path) -> AsyncIterator[Live]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        rig = await open_rig(llm, make_settings(tmp_path, quiet_seconds=0.3))
        buffer = MessageBuffer(rig.settings.quiet_seconds)
        bot = build_client(tg.token, tg.base_url)  # built as bot.build_bot builds them
        dp = build_dispatcher(rig.chat, buffer, rig.settings, GroupSettings(rig.engine))
        await bot.set_my_commands(bot_commands())
        polling = asyncio.create_task(dp.start_polling(bot, handle_signals=False, close_bot_session=False))
        try:
            yield Live(tg, llm, rig, buffer)
        finally:
            with contextlib.suppress(RuntimeError):
                await dp.stop_polling()
            await asyncio.wait_for(polling, 10)
            await buffer.close()
            await bot.session.close()
            await close_rig(rig)


@pytest.fixture
async def tool_chat(rig: Rig) -> AsyncIterator[ChatService]:
    """A chat service on the rig with the memory tools on, wired as ``bot.py`` wires them: the tool's
    forgetting goes through the service, so it leaves the in-process context too."""
    service: ChatService

    async def forget(scope: Scope, handles: Iterable[int]) -> int:
        return await service.forget(scope, handles)

    service = ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock,
                          rng=random.Random(1), tools=memory_tools(rig.engine, forget=forget, clock=rig.clock))
    await service.load()
    try:
        yield service
    finally:
        await service.drain()
