"""Admin commands through aiogram's real client against the fake Telegram server, the usage table fed by
the real LLM client, and the operators' command line (``python bot.py users | forget | export | stats``)."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import os
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from PIL import Image

import bot as bot_main
from companion.chat.buffer import MessageBuffer
from companion.chat.group import GroupSettings
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.csvexport import SCOPE_HEADER
from companion.core.csvformat import HEADERS
from companion.core.models import MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.core.usage import UsageRecord
from companion.engine.admin_port import AdminPort
from companion.llm.client import LLMClient
from companion.ops.admin.admin_service import AdminService, usage_chart
from companion.ops.admin.admin_texts import NO_CHART, PRIVATE_ONLY
from companion.ops.admin.chart import CHINESE, ENGLISH, Labels, pick_labels
from companion.ops.engine_assembly import engine_on
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import EVERY_STATUS, UsageCell
from companion.storage.sqlite import SQLiteStore
from companion.storage.sqlite.usage_log import SQLiteUsageLog
from handlers import build_dispatcher
from handlers.admin import register_admin_commands
from handlers.commands import bot_commands
from memory import MemoryEngine
from tests.fakes import FakeLLM, FakeTelegram
from tests.support import Clock, make_settings

ADMIN, STRANGER, USER, OTHER = 7001, 7002, 4242, 5353
NOW = datetime(2025, 12, 23, 2, 0, tzinfo=UTC)
ADMIN_COMMANDS = ("mem_add", "mem_del", "mem_edit", "mem_export", "mem_stats", "mem_user")


@dataclass
class AdminRig:
    tg: FakeTelegram
    llm: FakeLLM
    engine: MemoryEngine
    store: SQLiteStore
    chat: ChatService
    clock: Clock

    async def say(self, user: int, text: str) -> str:
        count = len(self.tg.sent_messages(user))
        self.tg.push_text(user, text)
        sent = await self.tg.wait_for_messages(user, count + 1, timeout=10)
        return str(sent[count]["text"])

    async def save(self, scope: Scope, text: str) -> int:
        draft = MemoryDraft(event=text, keywords=[], importance=60, type=MemoryType.FACT)
        return (await self.engine.save_draft(scope, draft, self.clock())).id

    async def everything(self) -> list[dict[str, Any]]:
        return [asdict(m) for s in await self.store.scopes() for m in await self.store.fetch_memories(s, EVERY_STATUS)]


@pytest.fixture
async def admin_rig(tmp_path: Path) -> AsyncIterator[AdminRig]:
    settings = make_settings(tmp_path, admin_ids=[ADMIN], quiet_seconds=0.2)
    clock = Clock()
    async with FakeTelegram() as tg, FakeLLM() as llm:
        store = await SQLiteStore.open(settings.db_path)
        client = LLMClient(api_key="sk-test", base_url=llm.base_url, model="deepseek-chat", max_retries=0, timeout=5,
                           usage_sink=SQLiteUsageLog(store).add, clock=clock)
        engine = await engine_on(store, settings, KeywordExtractor(), client)
        chat = ChatService(engine, client, ChatConfig.from_settings(settings), clock=clock, rng=random.Random(1))
        admin = AdminService(engine, AdminPort(store, SQLiteUsageLog(store)), settings.tz, forget=chat.forget,
                             clock=clock)
        buffer = MessageBuffer(settings.quiet_seconds)
        bot = Bot(tg.token, session=AiohttpSession(api=TelegramAPIServer.from_base(tg.base_url)))
        dp = build_dispatcher(chat, buffer, settings, GroupSettings(engine), admin)
        await bot.set_my_commands(bot_commands())
        await register_admin_commands(bot, settings.admin_ids)
        polling = asyncio.create_task(dp.start_polling(bot, handle_signals=False, close_bot_session=False))
        try:
            yield AdminRig(tg, llm, engine, store, chat, clock)
        finally:
            with contextlib.suppress(RuntimeError):
                await dp.stop_polling()
            await asyncio.wait_for(polling, 10)
            await buffer.close()
            await bot.session.close()
            await chat.drain()
            await store.close()
            await client.close()


async def test_a_non_admin_gets_no_permission_for_every_command_and_nothing_changes(admin_rig: AdminRig) -> None:
    handle = await admin_rig.save(Scope(USER), "喜欢喝拿铁")
    before = await admin_rig.everything()
    for text in (f"/mem_add {USER} 偷偷加一条 90 permanent", f"/mem_del {USER} {handle}",
                 f"/mem_edit {USER} {handle} 改掉 10", f"/mem_export {USER}", "/mem_export", "/mem_stats",
                 f"/mem_user {USER}"):
        assert await admin_rig.say(STRANGER, text) == "没有权限", text
    assert await admin_rig.everything() == before
    assert not admin_rig.tg.sent_uploads()
    assert not [r for r in admin_rig.llm.requests]  # nothing was even asked of the model


async def test_admin_menu_only_in_the_admins_chat(admin_rig: AdminRig) -> None:
    names = {c["command"] for c in admin_rig.tg.commands or []}
    assert names and not names & set(ADMIN_COMMANDS)
    admin_menu = admin_rig.tg.commands_for({"type": "chat", "chat_id": ADMIN}) or []
    assert set(ADMIN_COMMANDS) <= {c["command"] for c in admin_menu} and names <= {c["command"] for c in admin_menu}
    assert admin_rig.tg.commands_for({"type": "chat", "chat_id": STRANGER}) is None


async def test_add_edit_delete_and_user_summary(admin_rig: AdminRig) -> None:
    answer = await admin_rig.say(ADMIN, f"/mem_add {USER} 喜欢喝燕麦拿铁 80 permanent")
    assert answer.startswith(f"已给用户 {USER} 加上")
    [memory] = await admin_rig.engine.memories(Scope(USER))
    assert (memory.event, memory.importance, memory.validity, memory.tier, memory.origin) == (
        "喜欢喝燕麦拿铁", 80, Validity.PERMANENT, Tier.LONG, Origin.ADMIN)

    assert "已修改" in await admin_rig.say(ADMIN, f"/mem_edit {USER} {memory.id} 喜欢喝冰美式 70")
    edited = await admin_rig.engine.get(Scope(USER), memory.id)
    assert (edited.event, edited.importance) == ("喜欢喝冰美式", 70)

    summary = await admin_rig.say(ADMIN, f"/mem_user {USER}")
    assert str(USER) in summary and "有效记忆 1 条" in summary and "长期 1" in summary

    # A handle of another user is refused for this user: nothing changes on either side.
    theirs = await admin_rig.save(Scope(OTHER), "别人的记忆")
    before = await admin_rig.everything()
    assert await admin_rig.say(ADMIN, f"/mem_del {USER} {theirs}") == "这条记忆不属于这个用户，什么都没改。"
    assert await admin_rig.say(ADMIN, f"/mem_edit {USER} {theirs} 改掉") == "这条记忆不属于这个用户，什么都没改。"
    assert await admin_rig.say(ADMIN, f"/mem_del {USER} 999999") == "没有这条记忆。"
    assert await admin_rig.say(ADMIN, "/mem_del abc") == "用法：/mem_del 用户ID 记忆编号"
    assert await admin_rig.everything() == before

    assert await admin_rig.say(ADMIN, f"/mem_del {USER} {memory.id}") == f"已删除用户 {USER} 的记忆 #{memory.id}。"
    assert await admin_rig.engine.memories(Scope(USER)) == []
    [tomb] = await admin_rig.engine.memories(Scope(USER), {Status.FORGOTTEN})
    assert tomb.event == ""

    await admin_rig.engine.remember(Scope(USER), [MemoryDraft("每周一不要打扰我", ["周一"], 80.0,
                                                              type=MemoryType.INSTRUCTION)], NOW)
    # The same word as /stats (chat.texts.TYPE_NAMES) for the same type.
    assert "要求 1" in await admin_rig.say(ADMIN, f"/mem_user {USER}")


async def test_export_sends_an_excel_readable_csv(admin_rig: AdminRig) -> None:
    await admin_rig.save(Scope(USER), "=1+1 喜欢猫")
    await admin_rig.save(Scope(USER), "住在杭州")
    await admin_rig.save(Scope(OTHER), "喜欢狗")
    admin_rig.tg.push_text(ADMIN, f"/mem_export {USER}")
    admin_rig.tg.push_text(ADMIN, "/mem_export 喜欢")
    first, second = await admin_rig.tg.wait_for_uploads(ADMIN, 2)
    assert first["kind"] == "document" and first["file"]["filename"] == f"memories_{USER}.csv"
    content: bytes = first["file"]["content"]
    assert content.startswith(b"\xef\xbb\xbf")  # the BOM Excel needs to show Chinese
    rows = list(csv.DictReader(io.StringIO(content.decode("utf-8-sig"))))
    assert list(rows[0]) == [SCOPE_HEADER, *HEADERS]
    assert sorted(r["事件"] for r in rows) == ["'=1+1 喜欢猫", "住在杭州"]  # a formula stays text
    assert {r[SCOPE_HEADER] for r in rows} == {f"u{USER}"} and "导出 2 条" in str(first["caption"])
    keyword_rows = list(csv.DictReader(io.StringIO(second["file"]["content"].decode("utf-8-sig"))))
    assert sorted(r["事件"] for r in keyword_rows) == ["'=1+1 喜欢猫", "喜欢狗"]
    assert await admin_rig.say(ADMIN, "/mem_export 9999") == "没有符合条件的记忆。"


async def test_stats_text_and_chart_with_llm_usage_from_the_table(admin_rig: AdminRig) -> None:
    await admin_rig.save(Scope(USER), "喜欢猫")
    await admin_rig.chat.start(Scope(USER))
    reply = await admin_rig.chat.reply(Scope(USER), "今天天气不错")
    assert reply.ok
    await admin_rig.chat.drain()
    text = await admin_rig.say(ADMIN, "/mem_stats")
    [photo] = await admin_rig.tg.wait_for_uploads(ADMIN, 1)
    assert photo["kind"] == "photo" and photo["file"]["content"].startswith(b"\x89PNG\r\n\x1a\n")
    assert text.startswith("1 位用户（1 个范围）") and "中期 1" in text and "重要程度分布" in text
    assert "最近7天模型调用" in text and "回复 1次" in text and "reply" not in text
    report = await SQLiteUsageLog(admin_rig.store).report(NOW - timedelta(days=1), timedelta(hours=8))
    reply_cell = next(c for c in report if c.purpose == "reply")
    assert reply_cell.calls == 1 and reply_cell.prompt_tokens > 0 and reply_cell.day == "2025-12-23"


# ---- the command line ------------------------------------------------------------------------------

def _seed(data_dir: Path) -> tuple[int, int]:
    async def seed() -> tuple[int, int]:
        settings = make_settings(data_dir.parent)
        store = await SQLiteStore.open(settings.db_path)
        try:
            engine = await engine_on(store, settings, KeywordExtractor())
            now = datetime.now(UTC)
            a = (await engine.save_draft(Scope(USER), MemoryDraft("喜欢猫", [], 70), now)).id
            await engine.save_draft(Scope(USER), MemoryDraft("住在杭州", [], 50), now)
            b = (await engine.save_draft(Scope(OTHER), MemoryDraft("喜欢狗", [], 40), now)).id
            await SQLiteUsageLog(store).add(_usage_row(now))
            return a, b
        finally:
            await store.close()

    return asyncio.run(seed())


def _usage_row(now: datetime) -> UsageRecord:
    return UsageRecord(now, "reply", "deepseek-chat", 1200, 80, 1000, 200, 850.0)


def test_cli_users_forget_export_stats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BACKUP_DIR", str(tmp_path / "backups"))
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    cat, dog = _seed(tmp_path / "data")

    assert bot_main.main(["users"]) == 0
    out = capsys.readouterr().out
    assert "2 users" in out and str(USER) in out and str(OTHER) in out

    assert bot_main.main(["stats"]) == 0
    out = capsys.readouterr().out
    assert "users: 2" in out and "reply" in out and "1200" in out and "1000" in out

    out_file = tmp_path / "x.csv"
    assert bot_main.main(["export", "--user", str(USER), "--out", str(out_file)]) == 0
    assert "exported 2 memories" in capsys.readouterr().out
    assert out_file.read_bytes().startswith(b"\xef\xbb\xbf")

    assert bot_main.main(["forget", str(USER), str(dog)]) == 1  # another user's handle: refused
    assert "another user" in capsys.readouterr().err
    assert bot_main.main(["forget", str(USER), str(cat)]) == 0
    assert f"forgot memory {cat}" in capsys.readouterr().out
    assert bot_main.main(["forget", str(USER), "--all"]) == 0
    assert "forgot 1 memories" in capsys.readouterr().out
    assert bot_main.main(["users"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == [str(USER), "0"] for line in lines)
    assert any(line.split()[:2] == [str(OTHER), "1"] for line in lines)


@pytest.mark.parametrize("key", ["", None])
def test_operator_commands_run_without_a_model_key(tmp_path: Path, key: str | None) -> None:
    """``users`` and ``forget`` never ask the model: with no LLM_API_KEY (blank, as .env.example leaves it, or
    absent) and DeepSeek's default LLM_BASE_URL they work, as a process started by an operator."""
    data = tmp_path / "data"
    cat, _ = _seed(data)
    env = {name: value for name, value in os.environ.items() if name not in {"LLM_API_KEY", "LLM_BASE_URL"}}
    env |= {"DATA_DIR": str(data), "BACKUP_DIR": str(tmp_path / "backups")}
    if key is not None:
        env["LLM_API_KEY"] = key

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "bot.py", *args], cwd=Path(__file__).parent.parent, env=env,
                              capture_output=True, text=True, timeout=120)

    users = run("users")
    assert users.returncode == 0, users.stderr
    assert "2 users" in users.stdout and str(USER) in users.stdout
    forgot = run("forget", str(USER), str(cat))
    assert forgot.returncode == 0, forgot.stderr
    assert f"forgot memory {cat}" in forgot.stdout


async def test_usage_report_by_local_day_and_purpose(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "usage.sqlite3")
    try:
        log = SQLiteUsageLog(store)
        late = datetime(2025, 12, 22, 17, 0, tzinfo=UTC)  # 01:00 on the 23rd in Shanghai
        for at, purpose, hit in ((late, "reply", 900), (late, "reply", None), (late - timedelta(hours=2), "reply", 0),
                                 (late, "extraction", None), (late - timedelta(days=9), "reply", 1)):
            await log.add(UsageRecord(at, purpose, "deepseek-chat", 1000, 50, hit, None if hit is None else 1000 - hit,
                                   400.0, ok=purpose != "extraction"))
        cells = await log.report(late - timedelta(days=7), timedelta(hours=8))
    finally:
        await store.close()
    summary = [(c.day, c.purpose, c.calls, c.failures, c.prompt_tokens, c.cache_hit_tokens) for c in cells]
    assert summary == [("2025-12-22", "reply", 1, 0, 1000, 0), ("2025-12-23", "extraction", 1, 1, 1000, 0),
                       ("2025-12-23", "reply", 2, 0, 2000, 900)]


def test_usage_chart_is_a_png_with_a_stacked_bar_per_day() -> None:
    cells = [UsageCell(f"2025-12-{d}", "reply", 3, 0, 1000 * d, 500 * d, 200 * d, 0, 100.0, 0) for d in (20, 21, 22)]
    image = Image.open(io.BytesIO(usage_chart(cells)))
    image.load()
    assert image.format == "PNG" and image.size == (800, 400)
    colors = {color for _, color in image.convert("RGB").getcolors(maxcolors=1 << 16) or []}
    assert {(0x4C, 0x72, 0xB0), (0xDD, 0x84, 0x52), (0x55, 0xA8, 0x68)} <= colors  # the three series


@pytest.mark.parametrize(("installed", "labels", "font"), [
    (set(), ENGLISH, None),
    ({"DejaVu Sans", "STIXGeneral"}, ENGLISH, None),
    ({"DejaVu Sans", "WenQuanYi Zen Hei"}, CHINESE, "WenQuanYi Zen Hei"),
    ({"SimHei", "Noto Sans CJK SC"}, CHINESE, "Noto Sans CJK SC"),
])
def test_chart_labels_are_chinese_only_with_a_cjk_font(installed: set[str], labels: Labels, font: str | None) -> None:
    assert pick_labels(installed) == (labels, font)


async def test_mem_stats_without_matplotlib_says_how_to_get_the_chart(admin_rig: AdminRig,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    admin_rig.tg.push_text(ADMIN, "/mem_stats")
    await admin_rig.tg.wait_for_messages(ADMIN, 2)
    texts_sent = [m["text"] for m in admin_rig.tg.sent_messages(ADMIN)]
    assert texts_sent[0].startswith("0 位用户") and texts_sent[1] == NO_CHART


def test_the_bot_process_imports_no_plotting_library() -> None:
    """matplotlib is imported when an admin asks for the chart, never by loading the bot and its handlers."""
    code = ("import sys, bot, handlers, handlers.admin, companion.ops.admin.admin_service, companion.ops.admin.chart; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in {'matplotlib', 'PIL'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parent.parent, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


async def test_admin_commands_in_a_group_answer_a_hint_and_read_nothing(admin_rig: AdminRig) -> None:
    """An admin's command in a public group would post private data there: only the hint is posted."""
    group = -100777
    handle = await admin_rig.save(Scope(USER), "喜欢喝拿铁")
    before = await admin_rig.everything()
    commands = (f"/mem_export@companion_bot {USER}", "/mem_export@companion_bot", f"/mem_user@companion_bot {USER}",
                "/mem_stats@companion_bot", f"/mem_add@companion_bot {USER} 加一条 90",
                f"/mem_del@companion_bot {USER} {handle}", f"/mem_edit@companion_bot {USER} {handle} 改掉")
    for text in commands:
        admin_rig.tg.push_group_text(ADMIN, group, text)
    sent = await admin_rig.tg.wait_for_messages(group, len(commands), timeout=10)
    await asyncio.sleep(0.3)  # anything more (a file, a chart) would have arrived by now
    assert [m["text"] for m in admin_rig.tg.sent_messages(group)] == [PRIVATE_ONLY] * len(commands)
    assert len(sent) == len(commands) and not admin_rig.tg.sent_uploads()
    assert "喜欢喝拿铁" not in str(admin_rig.tg.sent_messages())
    assert await admin_rig.everything() == before
