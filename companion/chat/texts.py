"""Everything an end user reads, in Chinese, and Telegram-size message splitting."""

from __future__ import annotations

TELEGRAM_LIMIT = 4096

GREETING_NEW = "嗨，我是小伴～从现在起我会陪你聊天，也会慢慢记住对你重要的事。今天过得怎么样？"
GREETING_BACK = "又见面啦～我一直记着你呢。最近怎么样？"
STOPPED = "好的，我先安静下来啦。我记得的事情都还在，想聊的时候发 /start_aiGF 叫我。"
NOT_STARTED = "现在还没开启陪伴模式哦。发送 /start_aiGF 开始和我聊天，/help 查看全部命令。"
LLM_DOWN = "抱歉，我这边刚刚有点卡住了，没能好好回复你。你的话我记下了，稍等一会儿再和我说说好吗？"
NON_TEXT = "我现在只看得懂文字哦～能用文字和我说说吗？"
INTERNAL_ERROR = "哎呀，我这边出了点小问题，请稍后再试一次。"
HELP = (
    "我是小伴，一个会记住你的聊天伙伴。\n\n"
    "/start_aiGF — 开启陪伴模式\n"
    "/stop_aiGF — 关闭陪伴模式（长期记忆会保留）\n"
    "/help — 查看帮助\n\n"
    "开启后直接发文字就好，我会在你说完后一起回复。"
)
# Telegram's command menu accepts only lower-case names; typing /start_aiGF still matches (ignore_case).
COMMANDS = {
    "start_aigf": "开启陪伴模式",
    "stop_aigf": "关闭陪伴模式",
    "help": "查看帮助",
}


def utf16_len(text: str) -> int:
    """Telegram measures message length in UTF-16 code units (an emoji can count as two)."""
    return len(text.encode("utf-16-le")) // 2


def split_message(text: str, limit: int = TELEGRAM_LIMIT) -> list[str]:
    """Split a reply into Telegram-sized parts, preferring paragraph, line and sentence breaks."""
    parts: list[str] = []
    rest = text
    while utf16_len(rest) > limit:
        cut = _fit(rest, limit)
        head = rest[:cut]
        for sep in ("\n\n", "\n", "。", "！", "？", ". ", "，", " "):
            at = head.rfind(sep)
            if at >= cut // 2:
                cut = at + len(sep)
                break
        parts.append(rest[:cut].rstrip() or rest[:cut])
        rest = rest[cut:].lstrip("\n")
    if rest.strip() or not parts:
        parts.append(rest)
    return [p for p in parts if p]


def _fit(text: str, limit: int) -> int:
    """The longest prefix (in characters) within ``limit`` UTF-16 units."""
    units = 0
    for i, ch in enumerate(text):
        units += 2 if ord(ch) > 0xFFFF else 1
        if units > limit:
            return max(i, 1)
    return len(text)
