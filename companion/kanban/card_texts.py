"""What the user reads about their Dida365 kanban (Chinese)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

NOT_CONFIGURED = "这个机器人没有开启滴答清单同步。"
NO_KEY = "管理员还没有设置令牌加密密钥（DIDA_TOKEN_KEY），暂时不能连接滴答清单。"
LINK = ("点下面的链接，登录滴答清单并授权小伴读写任务（10分钟内有效）：\n{url}\n\n"
        "{after}\n群聊里的记忆不会同步到你的看板。")
AFTER_CALLBACK = "授权后会自动连接，我会在这里告诉你结果。"
AFTER_CODE = "授权后页面会显示一个授权码，把它发给我：/dida_code 授权码"
CODE_USAGE = "用法：/dida_code 授权码（先发送 /dida_link 获取授权链接）"
CODE_NO_STATE = "授权链接已过期或还没有获取，请先发送 /dida_link，10分钟内把授权码发给我。"
CODE_REFUSED = "滴答清单没有接受这个授权码（可能已用过或过期），请重新发送 /dida_link。"
LINKED = "已连接滴答清单：项目「小滴の记忆」里有短期、中期、长期三列，同步了 {cards} 张记忆卡片。"
LINK_FAILED = "暂时连不上滴答清单，请稍后再试 /dida_link。"
NOT_LINKED = "你还没有连接滴答清单，发送 /dida_link 开始。"
SYNCED = "同步好了：从看板读到 {pulled} 处改动，更新了 {pushed} 张卡片。"
SYNC_LONG = "要同步的改动比较多，我在后台慢慢同步，好了告诉你。这期间照常聊天就好。"
SYNC_WAIT = "滴答清单暂时连不上或请求太频繁，改动都记着，稍后会自动同步。"
SYNC_BROKEN = "滴答清单的授权失效了，请重新发送 /dida_link 连接，期间的改动不会丢。"
SYNC_PAUSED = "看板的项目或某一列不见了，同步已暂停。发送 /dida_sync 我会重建看板并重新同步。"
UNLINK_ASK = ("要断开滴答清单吗？\n/dida_unlink keep —— 断开，卡片留在你的滴答清单里\n"
              "/dida_unlink delete —— 断开，并删除小伴同步的卡片")
UNLINKED_KEEP = "已断开滴答清单，卡片都留在你的滴答清单里。"
UNLINKED_DELETE = "已断开滴答清单，小伴同步的卡片已删除。"
CALLBACK_OK = "已连接滴答清单，可以回到 Telegram 了。"
CALLBACK_BAD = "这个授权链接已过期或已用过，请回到 Telegram 重新发送 /dida_link。"
CALLBACK_FAILED = "暂时连不上滴答清单，请回到 Telegram 稍后再试 /dida_link。"

NOTICES = {
    "broken": "滴答清单的授权失效了（可能在滴答清单里取消了授权或已过期），同步已停止。"
              "发送 /dida_link 重新连接，这期间的改动都会补上。",
    "expiry": "滴答清单的授权一周内就要到期了，发送 /dida_link 重新连接就能继续同步。",
    "project": "滴答清单里的「小滴の记忆」项目不见了（被删除或归档），同步已暂停，记忆都还在。"
               "发送 /dida_sync 我会重建项目并重新放上卡片。",
    "column": "「小滴の记忆」里有一列被删掉了，同步已暂停，记忆都还在。发送 /dida_sync 我会重建这一列。",
    "bulk": "滴答清单上一下子少了很多张卡片（可能是清空了列表，或者同步出了问题），对应的记忆我都先留着。"
            "如果确实是你有意删掉的，发送 /dida_sync 删除，我就把这些记忆也忘掉。",
    "full": "记忆已经到上限了，看板上新加的卡片先不记下，留在滴答清单里。"
            "归档或忘掉一些旧记忆腾出位置后，我会自动把它们记下。",
    "columns": "你的滴答清单没有按列放卡片，所以每张卡片都加了“短期记忆/中期记忆/长期记忆”标签来标明层级；"
               "在看板上改层级请改这个标签。",
}


def status(linked_at: datetime, cards: int, last_sync: datetime | None, pending: int, state: str, error: str,
           tz: ZoneInfo) -> str:
    def when(moment: datetime | None) -> str:
        return "还没有" if moment is None else moment.astimezone(tz).strftime("%Y-%m-%d %H:%M")

    states = {"ok": "正常", "broken": "授权失效，请重新 /dida_link", "paused": "已暂停，发送 /dida_sync 重建"}
    lines = [f"滴答清单：{states.get(state, state)}", f"连接于：{when(linked_at)}", f"卡片：{cards} 张",
             f"上次同步：{when(last_sync)}", f"待同步的改动：{pending} 处"]
    if error:
        lines.append("上次出错：" + ("请求太频繁，稍后自动重试" if "exceed_query_limit" in error else
                                   "授权失效" if "401" in error else "连接失败，会自动重试"))
    return "\n".join(lines)
