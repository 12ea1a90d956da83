"""The command table drives every list of commands: each menu scope, /help in private chats and groups,
the operators' menu and the console. A row added to the table shows up in all of them; a router that
answers a command the table lacks fails when it is built."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiogram import Router
from aiogram.filters import Command

from companion.chat import command_table as commands
from companion.chat import group_texts as gt
from companion.chat import texts
from companion.chat.command_table import CommandRow, Place
from companion.hosts import console
from handlers import build_client, build_router
from handlers.admin import register_admin_commands
from handlers.commands import command
from handlers.groups import set_menus
from tests.fakes import FakeTelegram

OPERATOR = 4242
FAKE = {
    Place.PRIVATE: CommandRow("fake_private", Place.PRIVATE, "私聊假命令", "私聊假命令的帮助", "参数"),
    Place.GROUP: CommandRow("fake_group", Place.GROUP, "群假命令", "群假命令的帮助"),
    Place.GROUP_ADMIN: CommandRow("fake_admin", Place.GROUP_ADMIN, "管理员假命令", "管理员假命令的帮助"),
    Place.OPERATOR: CommandRow("fake_operator", Place.OPERATOR, "运营假命令"),
    Place.CONSOLE: CommandRow("fake_console", Place.CONSOLE, help="控制台假命令的帮助", aliases=("fc",)),
}


@pytest.fixture
def fake_rows(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(commands, "TABLE", (*commands.TABLE, *FAKE.values()))
    yield


async def menus() -> dict[str, list[str]]:
    async with FakeTelegram() as tg:
        bot = build_client(tg.token, tg.base_url)
        try:
            await set_menus(bot)
            await register_admin_commands(bot, [OPERATOR])
        finally:
            await bot.session.close()
        found = {kind: [c["command"] for c in menu] for kind, menu in tg.menus_by_type().items()}
        found["operator"] = [c["command"] for c in tg.commands_for({"type": "chat", "chat_id": OPERATOR}) or []]
        return found


async def test_a_new_row_reaches_every_menu_of_its_place(fake_rows: None) -> None:
    found = await menus()
    assert "fake_private" in found["default"] and "fake_private" in found["all_private_chats"]
    assert "fake_private" in found["operator"]
    assert "fake_group" in found["all_group_chats"] and "fake_group" in found["all_chat_administrators"]
    assert "fake_admin" in found["all_chat_administrators"] and "fake_admin" not in found["all_group_chats"]
    assert "fake_operator" in found["operator"]
    assert all("fake_operator" not in found[kind] for kind in found if kind != "operator")
    assert all("fake_console" not in names for names in found.values())


async def test_menus_keep_the_tables_order_per_scope() -> None:
    found = await menus()
    private = [r.name.lower() for r in commands.rows(Place.PRIVATE) if r.menu]
    assert found["all_private_chats"] == private
    assert found["default"] == [name for name in private if name != "share_private"] == list(texts.COMMANDS)
    assert found["operator"] == found["default"] + [r.name for r in commands.rows(Place.OPERATOR)]
    group = [r.name.lower() for r in commands.rows(Place.GROUP) if r.menu]
    assert found["all_group_chats"] == group
    assert found["all_chat_administrators"] == [*group, "group_memory", "forget_group"]


def test_a_new_row_reaches_the_help_of_its_place(fake_rows: None) -> None:
    assert "/fake_private 参数 — 私聊假命令的帮助" in texts.help_text()
    group_help = gt.group_help().format(bot="companion_bot")
    assert "/fake_group@companion_bot — 群假命令的帮助" in group_help
    assert group_help.index("群管理员") < group_help.index("/fake_admin@companion_bot — 管理员假命令的帮助")
    assert "/fake_console — 控制台假命令的帮助" in console.help_text()
    assert console.known_commands()["/fake_console"] == console.known_commands()["/fc"] == "fake_console"
    for text in (texts.help_text(), group_help):
        assert "fake_operator" not in text and "fake_console" not in text


def test_help_lists_conversation_commands_before_memory_commands() -> None:
    lines = [line.split(" ")[0] for line in texts.help_text().splitlines() if line.startswith("/")]
    assert lines == ["/start_aiGF", "/stop_aiGF", "/reset", "/memories", "/forget", "/why", "/stats", "/weekly",
                     "/followup", "/share_private"]


def test_a_handler_can_register_only_a_row_of_the_table(fake_rows: None) -> None:
    assert command(Place.PRIVATE, "fake_private").commands == ("fake_private",)
    assert command(Place.PRIVATE, "start_aiGF").ignore_case
    with pytest.raises(LookupError, match="fake_group"):
        command(Place.PRIVATE, "fake_group")
    with pytest.raises(LookupError, match="not_a_command"):
        command((Place.PRIVATE, Place.GROUP), "not_a_command")


def registered(router: Router) -> set[str]:
    names: set[str] = set()
    for handler in router.message.handlers:
        for flt in handler.filters or []:
            if isinstance(flt.callback, Command):
                names.update(str(c).lower() for c in flt.callback.commands)
    for sub in router.sub_routers:
        names |= registered(sub)
    return names


def test_every_command_the_bot_answers_is_a_row_and_every_row_is_answered() -> None:
    telegram = {r.name.lower() for r in commands.TABLE if r.place is not Place.CONSOLE}
    assert registered(build_router()) == telegram
