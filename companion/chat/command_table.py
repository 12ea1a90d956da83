"""The one table of commands: where each is offered, its menu text and its help line.

The Telegram menus (one per command scope), ``/help`` in private chats and groups, and the console's
commands are all read from ``TABLE``. A command's name is the key a front end maps to its handler
(``handlers/`` register each row's name on their routers; ``companion.hosts.console`` maps the console rows).
A new command is one row here plus its handler. Plain data: no Telegram types, so the console and the
tests read it without aiogram.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum


class Place(StrEnum):
    PRIVATE = "private"  # a private chat with the bot
    GROUP = "group"  # any member of a group, addressing the bot
    GROUP_ADMIN = "group_admin"  # a group's administrators, besides the group's commands
    OPERATOR = "operator"  # ADMIN_IDS, in their own private chat with the bot
    CONSOLE = "console"  # ``python bot.py console``


class Topic(IntEnum):
    """Help lists the conversation commands before the memory commands; menus keep the table's order."""

    CONVERSATION = 0
    MEMORY = 1


@dataclass(frozen=True)
class CommandRow:
    name: str  # as typed; Telegram menus show it lower-cased
    place: Place
    menu: str = ""  # the menu's description; empty: not in the menu
    help: str = ""  # what the help line says after the dash; empty: not in the help
    args: str = ""  # the arguments the help line shows after the name
    topic: Topic = Topic.CONVERSATION
    default_menu: bool = True  # a PRIVATE row also in the default scope's menu and the operator's
    ignore_case: bool = False
    aliases: tuple[str, ...] = ()
    # An optional integration the row belongs to: menus and help list it only once the host ``offer``s it.
    feature: str = ""


_P, _G, _GA, _OP, _C = Place.PRIVATE, Place.GROUP, Place.GROUP_ADMIN, Place.OPERATOR, Place.CONSOLE
_MEM = Topic.MEMORY
DIDA = "dida"  # the Dida365 kanban (companion/kanban), offered when the operator configured it
BOARD = "board"  # the memory board Mini App (handlers/board.py), offered when WEBAPP_URL is set

TABLE: tuple[CommandRow, ...] = (
    # Private chats, in menu order.
    CommandRow("start_aiGF", _P, "开启陪伴模式", "开启陪伴模式", ignore_case=True),
    CommandRow("stop_aiGF", _P, "关闭陪伴模式", "关闭陪伴模式（长期记忆会保留）", ignore_case=True),
    CommandRow("memories", _P, "我记得什么", "看看我记得什么（可翻页、忘掉、归档、升级）", "[关键词]", _MEM),
    CommandRow("forget", _P, "忘掉某些记忆", "让我忘掉某些事或全部", "关键词 | all", _MEM),
    CommandRow("why", _P, "这条记忆从哪来", "这条记忆是怎么来的", "关键词", _MEM),
    CommandRow("stats", _P, "记忆统计", "记忆统计", topic=_MEM),
    CommandRow("board", _P, "记忆面板", "打开记忆面板：按短期、中期、长期看和整理记忆", topic=_MEM, feature=BOARD),
    CommandRow("reset", _P, "重新开始对话", "结束这段对话，重新开始"),
    CommandRow("weekly", _P, "每周记忆小结 on/off", "每周记忆小结", "on|off", _MEM),
    CommandRow("followup", _P, "主动问候 on/off", "你说过的事过后，我是否主动发消息问候（默认开启）", "on|off", _MEM),
    CommandRow("help", _P, "查看帮助"),
    CommandRow("share_private", _P, "群里是否用你的私聊记忆 on/off", "允许在群里用上你私聊时的记忆（默认关闭）",
               "on|off", _MEM, default_menu=False),
    CommandRow("start", _P),
    CommandRow("dida_link", _P, "连接滴答清单看板", "把记忆同步到你的滴答清单看板", topic=_MEM, feature=DIDA),
    CommandRow("dida_code", _P, help="粘贴滴答清单授权页上的授权码", args="授权码", topic=_MEM, feature=DIDA),
    CommandRow("dida_status", _P, "滴答清单同步状态", "滴答清单的同步状态", topic=_MEM, feature=DIDA),
    CommandRow("dida_sync", _P, "马上同步滴答清单", "马上和滴答清单同步一次（看板被删时重建）", topic=_MEM,
               feature=DIDA),
    CommandRow("dida_unlink", _P, "断开滴答清单", "断开滴答清单（可选保留或删除卡片）", "keep | delete", _MEM,
               feature=DIDA),
    # Groups, in menu order.
    CommandRow("start_aiGF", _G, "在本群为你开启陪伴模式", "在这个群里为你开启陪伴模式（每个人单独开启）",
               ignore_case=True),
    CommandRow("stop_aiGF", _G, "在本群关闭陪伴模式", "在这个群里关闭陪伴模式", ignore_case=True),
    CommandRow("share_private", _G, "群里是否用你的私聊记忆 on/off", "允许在群里用上你私聊时的记忆（默认关闭）",
               "on|off"),
    CommandRow("memories", _G, "我在本群记得你什么（私信）", "看看我在这个群里记得你什么（私信发给你）", topic=_MEM),
    CommandRow("forget", _G, "忘掉本群关于你的事（私信确认）", "忘掉你在这个群里说过的事（私信里确认）", "关键词",
               _MEM),
    CommandRow("why", _G, "我为什么记得这件事（私信）", "我为什么记得这件事（私信发给你）", "关键词", _MEM),
    CommandRow("board", _G, "记忆面板（私聊打开）", "在私聊里打开记忆面板，可切换到本群的记忆", topic=_MEM,
               feature=BOARD),
    CommandRow("help", _G, "查看帮助"),
    CommandRow("start", _G),
    CommandRow("group_memory", _GA, "本群记忆 on/off（管理员）", "打开或关闭本群的记忆", "on|off"),
    CommandRow("forget_group", _GA, "清除本群所有记忆（管理员）", "清除本群所有人的记忆"),
    # The operators' commands (handlers/admin.py).
    CommandRow("mem_add", _OP, "管理：给用户加一条记忆"),
    CommandRow("mem_del", _OP, "管理：删除用户的一条记忆"),
    CommandRow("mem_edit", _OP, "管理：修改用户的一条记忆"),
    CommandRow("mem_export", _OP, "管理：导出记忆为CSV"),
    CommandRow("mem_stats", _OP, "管理：记忆和调用统计"),
    CommandRow("mem_user", _OP, "管理：一个用户的概况"),
    # The terminal (companion/hosts/console.py).
    CommandRow("start_aiGF", _C, help="开启陪伴模式", ignore_case=True),
    CommandRow("stop_aiGF", _C, help="关闭陪伴模式（长期记忆会保留）", ignore_case=True),
    CommandRow("memories", _C, help="看看我记得什么（翻页、忘掉、归档、升级、恢复）", args="[关键词]", topic=_MEM),
    CommandRow("forget", _C, help="让我忘掉某些事或全部（回复编号选择）", args="关键词 | all", topic=_MEM),
    CommandRow("why", _C, help="这条记忆是怎么来的", args="关键词", topic=_MEM),
    CommandRow("stats", _C, help="记忆统计", topic=_MEM),
    CommandRow("reset", _C, help="结束这段对话，重新开始"),
    CommandRow("help", _C, help="查看帮助"),
    CommandRow("quit", _C, help="退出（也可以按 Ctrl-D 或 Ctrl-C）", aliases=("exit", "q")),
)


_offered: set[str] = set()


def offer(feature: str) -> None:
    """List an optional integration's rows in menus and help from now on (the host calls it at start-up,
    before the menus are set, when the integration is configured)."""
    _offered.add(feature)


def rows(place: Place) -> list[CommandRow]:
    """The rows offered at ``place``: every row, bar those of an integration not offered."""
    return [found for found in TABLE if found.place is place and (not found.feature or found.feature in _offered)]


def row(place: Place, name: str) -> CommandRow:
    """The row of ``name`` at ``place``, offered or not; a handler registering a command the table lacks
    fails here."""
    for found in (r for r in TABLE if r.place is place):
        if found.name == name:
            return found
    raise LookupError(f"/{name} is not in the command table for {place}")


def menu(place: Place, *, default_only: bool = False) -> dict[str, str]:
    """The menu of ``place``: lower-cased name -> description (Telegram accepts only lower-case names)."""
    return {r.name.lower(): r.menu for r in rows(place) if r.menu and (r.default_menu or not default_only)}


def help_lines(place: Place, mention: str = "") -> str:
    """One line per row of ``place`` that has help, conversation commands first; ``mention`` follows each
    name (a group's ``@{bot}``)."""
    shown = sorted((r for r in rows(place) if r.help), key=lambda r: r.topic)
    return "\n".join(f"/{r.name}{mention}{' ' + r.args if r.args else ''} — {r.help}" for r in shown)
