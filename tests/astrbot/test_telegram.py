"""The plugin on a platform AstrBot can send privately on: AstrBot's own Telegram adapter, polling the fake
Bot API. The plugin is installed from a repository URL through AstrBot's GitHub proxy setting, served
from 127.0.0.1 as a GitHub archive; a group's long list goes to the member's private chat where Telegram
lets the bot write first, and stays short in the group where it does not; the weekly summary goes to an
opted-in user's private chat when the job runs on a Monday (issue 20); a follow-up about a told trip goes to
the user's private chat the morning after, once, and /主动问候 off stops them."""

from __future__ import annotations

import io
import zipfile
from collections.abc import AsyncIterator
from datetime import datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from aiohttp import web

from companion.hosts.astrbot.build import NAME
from tests.astrbot.conftest import Rig, start_astrbot
from tests.astrbot.model import script
from tests.fakes import FakeLLM
from tests.fakes.base import FakeServer
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.asyncio(loop_scope="module")

GROUP = -100500
ADMIN = "9001"  # in the harness's admins_id
REPO = f"https://github.com/companion-memory/{NAME}/tree/main"


class GitHubProxy(FakeServer):
    """A GitHub download proxy as AstrBot's setting names one (``{proxy}/{github url}``), serving the plugin
    as GitHub serves a branch's archive: every file under one ``<repo>-<branch>/`` folder."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.asked: list[str] = []

    def _routes(self, app: web.Application) -> None:
        app.router.add_get("/{tail:.*}", self._serve)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.asked.append(request.path)
        if not request.path.endswith(f"github.com/companion-memory/{NAME}/archive/refs/heads/main.zip"):
            return web.Response(status=404)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr(f"{NAME}-main/", "")
            for path in sorted(self.folder.rglob("*")):
                if path.is_file():
                    archive.write(path, f"{NAME}-main/{path.relative_to(self.folder).as_posix()}")
        return web.Response(body=buffer.getvalue(), content_type="application/zip")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def telegram_rig(astrbot_python: Path, built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
                       ) -> AsyncIterator[tuple[Rig, FakeTelegram, GitHubProxy]]:
    root = tmp_path_factory.mktemp("astrbot")
    async with FakeLLM() as llm, FakeTelegram() as telegram, GitHubProxy(built[0]) as proxy:
        llm.responder = script
        bot = await start_astrbot(astrbot_python, root, llm, telegram=telegram.base_url)
        rig = Rig(astrbot_python, root, llm, bot, telegram.base_url)
        try:
            assert await rig.bot.install_url(REPO, proxy.base_url)
            yield rig, telegram, proxy
        finally:
            await rig.bot.stop()


def plain(message: dict[str, object]) -> str:
    """A sent text as the user reads it (AstrBot's Telegram adapter sends MarkdownV2, escaped)."""
    return str(message["text"]).replace("\\", "")


async def test_installed_from_a_repository_url_through_astrbots_github_proxy(
    telegram_rig: tuple[Rig, FakeTelegram, GitHubProxy],
) -> None:
    rig, _, proxy = telegram_rig
    assert proxy.asked == [f"/https://github.com/companion-memory/{NAME}/archive/refs/heads/main.zip"]
    assert (rig.root / "data" / "plugins" / NAME / "main.py").exists()


async def test_a_groups_list_goes_privately_where_telegram_lets_the_bot_write_first(
    telegram_rig: tuple[Rig, FakeTelegram, GitHubProxy],
) -> None:
    rig, telegram, _ = telegram_rig
    for user in ("2001", "2002"):
        for i in range(7):
            await rig.bot.send(f"/增加记忆 {user} 第{i}件事 5", sender=ADMIN, group=str(GROUP), platform="telegram")
    telegram.push_text(2001, "/我的记忆")  # 2001 has a private chat with the bot; 2002 never opened one
    (empty,) = await telegram.wait_for_messages(2001, 1, timeout=60)
    assert plain(empty) == "我还没有记住关于你的事。"  # their private scope is not the group's

    telegram.push_group_text(2001, GROUP, "/我的记忆")
    (note,) = await telegram.wait_for_messages(GROUP, 1, timeout=60)
    assert plain(note) == "已私聊发给你了。"
    listed = plain((await telegram.wait_for_messages(2001, 2, timeout=60))[-1]).splitlines()
    assert listed[0] == "我记得关于你的这些（7 条）：" and len(listed) == 8

    telegram.push_group_text(2002, GROUP, "/mymemory")
    short = plain((await telegram.wait_for_messages(GROUP, 2, timeout=60))[-1]).splitlines()
    assert short[0] == "我记得关于你的这些（7 条）：" and len(short) == 7 and "还有 2 条没有列出" in short[-1]
    assert telegram.sent_messages(2002) == []


def next_monday(now: datetime, tz: ZoneInfo) -> datetime:
    local = now.astimezone(tz)
    monday = local.date() + timedelta(days=(7 - local.weekday()) % 7 or 7)
    return datetime.combine(monday, time(10, 0), tz)


async def test_the_weekly_summary_goes_privately_to_an_opted_in_user_on_monday(
    telegram_rig: tuple[Rig, FakeTelegram, GitHubProxy],
) -> None:
    rig, telegram, _ = telegram_rig
    await rig.bot.send("/增加记忆 3001 喜欢爬山 7", sender=ADMIN, platform="telegram")
    await rig.bot.send("/增加记忆 3002 喜欢游泳 7", sender=ADMIN, platform="telegram")
    telegram.push_text(3001, "/每周总结 on")
    (on,) = await telegram.wait_for_messages(3001, 1, timeout=60)
    assert plain(on).startswith("好的，每周一我会私聊告诉你")
    before = len(telegram.sent_messages(GROUP))
    telegram.push_group_text(3002, GROUP, "/weekly on")
    refused = await telegram.wait_for_messages(GROUP, before + 1, timeout=60)
    assert plain(refused[-1]) == "每周总结只在私聊里发送：请私聊我发送 /每周总结 on。"

    monday = next_monday(datetime.now(ZoneInfo("Asia/Shanghai")), ZoneInfo("Asia/Shanghai"))
    assert await rig.bot.weekly(monday - timedelta(days=1)) == 0  # a Sunday: nothing goes out
    assert await rig.bot.weekly(monday) == 1
    summary = plain((await telegram.wait_for_messages(3001, 2, timeout=60))[-1])
    assert summary.splitlines()[:2] == ["这周我记住了：", "· 喜欢爬山"]
    assert await rig.bot.weekly(monday + timedelta(hours=1)) == 0  # once a week
    assert telegram.sent_messages(3002) == []


async def test_the_morning_after_a_told_trip_a_follow_up_goes_privately_once(
    telegram_rig: tuple[Rig, FakeTelegram, GitHubProxy],
) -> None:
    rig, telegram, _ = telegram_rig
    tz = ZoneInfo("Asia/Shanghai")
    await rig.bot.send("/增加记忆 3003 前天去杭州出差了 7", sender=ADMIN, platform="telegram")
    telegram.push_text(3003, "你好呀")  # the user's private chat: where follow-ups go
    await telegram.wait_for_messages(3003, 1, timeout=60)
    tomorrow = datetime.combine(datetime.now(tz).date() + timedelta(days=1), time(10, 30), tz)
    assert await rig.bot.followups(tomorrow.replace(hour=8)) == 0  # before the hours
    assert await rig.bot.followups(tomorrow) == 1
    written = plain((await telegram.wait_for_messages(3003, 2, timeout=60))[-1])
    assert "/主动问候 off" in written, written
    asked = [r for r in rig.llm.chat_requests() if "主动发一条消息关心一下这件事" in str(r["messages"])]
    assert asked and "杭州出差" in str(asked[-1]["messages"]), "AstrBot's model writes it from the memory"
    assert await rig.bot.followups(tomorrow + timedelta(hours=2)) == 0  # once
    telegram.push_text(3003, "/主动问候 off")
    off = plain((await telegram.wait_for_messages(3003, 3, timeout=60))[-1])
    assert off.startswith("好的，我不再主动发消息问候了"), off
