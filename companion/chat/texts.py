"""Everything an end user reads, in Chinese, and Telegram-size message splitting."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING

from companion.chat.command_table import Place, help_lines, menu
from companion.core.models import StatusReason
from companion.core.week import WeekSummary
from companion.engine.weekly import weekly_text

if TYPE_CHECKING:
    from companion.core.models import Memory
    from companion.core.tiers import Action, Suggestion
    from companion.engine.followup_threads import Thread

TELEGRAM_LIMIT = 4096

GREETING_NEW = "嗨，我是小伴～从现在起我会陪你聊天，也会慢慢记住对你重要的事。今天过得怎么样？"
GREETING_BACK = "又见面啦～我一直记着你呢。最近怎么样？"
STOPPED = "好的，我先安静下来啦。我记得的事情都还在，想聊的时候发 /start_aiGF 叫我。"
NOT_STARTED = "现在还没开启陪伴模式哦。发送 /start_aiGF 开始和我聊天，/help 查看全部命令。"
LLM_DOWN = "抱歉，我这边刚刚有点卡住了，没能好好回复你。你的话我记下了，稍等一会儿再和我说说好吗？"
NON_TEXT = "我现在只看得懂文字哦～能用文字和我说说吗？"
INTERNAL_ERROR = "哎呀，我这边出了点小问题，请稍后再试一次。"


def help_text() -> str:
    """/help in a private chat, from the command table."""
    return (
        "我是小伴，一个会记住你的聊天伙伴。\n\n"
        f"{help_lines(Place.PRIVATE)}\n\n"
        "直接说“记住：……”我就会马上记下；说“忘掉……”我就会忘掉。\n"
        "记忆分短期、中期、长期：到时候我会问你要不要保留、升级或归档。"
    )


HELP = help_text()
# Typing /start_aiGF still matches the lower-cased menu entry (its row ignores case).
COMMANDS = menu(Place.PRIVATE, default_only=True)
START_GREETING = "你好，我是小伴～我会陪你聊天，并记住对你重要的事。点下面的按钮开启陪伴模式吧。"


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


# ---- memory the user steers ------------------------------------------------------------------------

TIER_NAMES = {"short": "短期记忆", "medium": "中期记忆", "long": "长期记忆"}
TYPE_NAMES = {"preference": "偏好", "fact": "事实", "instruction": "要求", "event": "事件"}
REVIEW_BATCH = 5
MEMORY_GONE = "这条记忆已经不在了（可能已被删除或不属于你）。"
NOTHING_TO_SAVE = "要我记住什么呢？可以直接说“记住：……”。"
EDIT_PROMPT = "好的，请直接发给我新的内容。"
SAVE_FAILED = "这次没能记下来，请稍后再试一次。"
NO_MEMORIES = "我还没有记住关于你的事情。聊着聊着我会慢慢记住，也可以说“记住：……”。"
NO_ARCHIVED = "归档里没有记忆。"
NO_PERMISSION = "没有权限"


LISTED_CHARS = 300  # a memory's words in a list: a page of them always fits one Telegram message


def listed(memory: Memory) -> str:
    """A memory's words (with its date) as a list shows them: cut at ``LISTED_CHARS`` with "…" (an admin's
    note may hold a whole message); /why shows all of it."""
    text = memory.shown
    return text if len(text) <= LISTED_CHARS else text[:LISTED_CHARS - 1] + "…"


def tier_name(tier: str) -> str:
    return TIER_NAMES.get(tier, tier)


DATE_UNCLEAR = "（日期没看懂，先没记日期，可以告诉我具体是哪天）"


def receipt(memory: Memory, *, edited: bool = False, replaced: Memory | None = None, date_unclear: bool = False) -> str:
    note = DATE_UNCLEAR if date_unclear else ""
    if replaced is not None:
        return f"改成了：{memory.shown}，原来是：{replaced.shown}（{tier_name(memory.tier.value)}）{note}"
    verb = "改好了" if edited else "记住了"
    return f"{verb}：{memory.shown}（{tier_name(memory.tier.value)}）{note}"


def undone(memory: Memory) -> str:
    return f"已撤销，还是原来的：{memory.shown}（{tier_name(memory.tier.value)}）"


NOTHING_TO_UNDO = "这条记忆没有可以撤销的修改了。"


def nothing_found(query: str) -> str:
    return f"我没有找到和“{query}”有关的记忆。"


def numbered(memories: Sequence[Memory]) -> str:
    return "\n".join(f"{i}. {listed(m)}（{tier_name(m.tier.value)}）" for i, m in enumerate(memories, start=1))


def confirm_forget(memories: Sequence[Memory]) -> str:
    return f"找到这些记忆，选择要忘掉的（忘掉后无法恢复）：\n{numbered(memories)}"


def forgotten(count: int) -> str:
    return f"已经忘掉了 {count} 条记忆，以后不会再提。" if count else "没有需要忘掉的记忆。"


def confirm_forget_all(count: int) -> str:
    # With nothing stored yet there is still something to wipe: what was said lately and not learned yet.
    if not count:
        return "还没有记下关于你的记忆，但会清掉我们最近的聊天内容，这些话以后也不会再被记住。确定吗？"
    return f"确定要忘掉关于你的全部 {count} 条记忆吗？我们最近的聊天内容也会一起清掉，这无法恢复。"


def forgot_all(count: int) -> str:
    if not count:
        return "最近的聊天内容已经清掉了，不会再被记住。"
    return f"已经忘掉了全部 {count} 条记忆，最近的聊天内容也清掉了，以后不会再提。"


REVIEW_VERBS = {"promote": "升级为", "keep": "继续保留在", "archive": "已归档", "forget": "已忘掉"}


def review_done(memory: Memory, action: Action) -> str:
    if action.value == "archive":
        return f"已归档：{memory.shown}（可在 /memories 里恢复）"
    if action.value == "forget":
        return "已忘掉一条记忆。"
    return f"{memory.shown}：{REVIEW_VERBS[action.value]}{tier_name(memory.tier.value)}"


def review_message(items: Sequence[tuple[Memory, Suggestion]]) -> str:
    lines = [f"有 {len(items)} 条记忆到了该整理的时候，你想怎么处理？"]
    for i, (memory, suggestion) in enumerate(items, start=1):
        advice = SUGGESTION_NAMES[suggestion.action.value]
        lines.append(f"{i}. {memory.shown}（{tier_name(memory.tier.value)}）— 建议{advice}：{suggestion.reason}")
    return "\n".join(lines)


SUGGESTION_NAMES = {"promote": "升级", "keep": "保留", "archive": "归档", "forget": "忘掉"}


def pending_reviews(items: Sequence[tuple[Memory, Suggestion]]) -> str:
    lines = [f"有{len(items)}条记忆待处理，要看看吗？"]
    for i, (memory, suggestion) in enumerate(items, start=1):
        lines.append(f"{i}. {memory.shown} — 建议{SUGGESTION_NAMES[suggestion.action.value]}（{suggestion.reason}）")
    lines.append("回复“按你说的办”，或者像“第一个升级，第二个删除”这样告诉我。")
    return "\n".join(lines)


def reset_done(saved: Memory | None) -> str:
    if saved is None:
        return "好，我们重新开始聊吧～"
    return f"好，我们重新开始聊吧～刚才聊的我记下了：{saved.shown}"


# ---- /memories, /why, /stats, weekly -----------------------------------------------------------------

ORIGIN_NAMES = {"extracted": "聊天中记下", "explicit": "你让我记住", "tool": "我主动记下", "admin": "管理员添加",
                "restore": "从备份恢复", "dida": "你在滴答清单里添加"}
NOT_YOURS = "这不是你的记忆，不能操作。"
UNDO_EXPIRED = "已经超过一分钟，不能撤销了。"
CANCELLED = "好的，什么都没改。"
WEEKLY_ON = "好的，每周我会告诉你这周记住了什么。发送 /weekly off 关闭。"
WEEKLY_OFF = "好的，不再发送每周记忆小结。"
FOLLOWUP_HOW_TO_STOP = "\n\n（这是我主动发来的问候。不想收到的话，发送 /followup off；想再收到就发 /followup on。）"
FOLLOWUP_ON = "好的，你说过的事（出差、考试、生日……）过后我会主动问问你。发送 /followup off 关闭。"
FOLLOWUP_OFF = "好的，我不再主动发消息问候了。聊天时我还是会记得问一句；发送 /followup on 重新打开。"
FOLLOWUP_STOPPED = "好的，这件事以后我不会再主动提了。"
FOLLOWUP_GONE = "这件事已经不在我的记忆里了。"


def memory_list(memories: Sequence[Memory], page: int, pages: int, *, query: str = "", archived: bool = False,
                start: int = 1, waiting: Collection[int] = ()) -> str:
    """``waiting``: the memories the companion will ask about (open follow-up threads), marked 待问候."""
    if archived:
        head = "已归档的记忆（不会在聊天中被想起，可以恢复）："
    elif query:
        head = f"和“{query}”有关的记忆："
    else:
        head = "我记得的关于你的事："
    lines = [head]
    current = ""
    for i, memory in enumerate(memories, start=start):
        if not archived and memory.tier.value != current:
            current = memory.tier.value
            lines.append(f"【{tier_name(current)}】")
        pin = "📌" if memory.pinned else ""
        mark = WAITING_MARK if memory.id in waiting else ""
        lines.append(f"{i - start + 1}. {pin}{listed(memory)}{mark}")
    if pages > 1:
        lines.append(f"（第 {page + 1}/{pages} 页）")
    return "\n".join(lines)


def why(memory: Memory, replaced: Sequence[Memory], replaced_by: Memory | None, tz_show: Callable[[object], str],
        link: str | None) -> str:
    lines = [f"“{memory.shown}”", f"· {tier_name(memory.tier.value)}，{TYPE_NAMES.get(memory.type.value, '')}，"
             f"重要程度 {memory.importance:.0f}"]
    learned = tz_show(memory.source_at or memory.created_at)
    lines.append(f"· {ORIGIN_NAMES.get(memory.origin.value, memory.origin.value)}，时间 {learned}")
    if link:
        lines.append(f"· 原消息：{link}")
    if memory.updated_at != memory.created_at:
        lines.append(f"· 最近更新：{tz_show(memory.updated_at)}")
    for old in replaced:
        if old.status_reason == StatusReason.REWORDED:
            lines.append(f"· 原来是：“{old.shown}”（{tz_show(old.updated_at)} 改成现在这样）")
        else:
            lines.append(f"· 取代了之前的：“{old.shown}”")
    if replaced_by is not None:
        lines.append(f"· 已被新的信息取代：“{replaced_by.shown}”")
    if memory.last_mentioned_at or memory.last_accessed_at:
        last = max(t for t in (memory.last_mentioned_at, memory.last_accessed_at) if t is not None)
        lines.append(f"· 上次被想起：{tz_show(last)}（共 {memory.mention_count + memory.access_count} 次）")
    else:
        lines.append("· 还没有在聊天中被想起过")
    return "\n".join(lines)


WAITING_MARK = "（待问候）"


def followed_up(thread: Thread | None, tz_show: Callable[[object], str]) -> str:
    """What ``/why`` adds about a memory's follow-up: when it was written first, answered, or stopped."""
    if thread is None:
        return ""
    lines = []
    if thread.pushed_at is not None:
        answer = "你回复了" if thread.answered else "你还没回复"
        lines.append(f"· 我主动问候过：{tz_show(thread.pushed_at)}（{answer}）")
    if thread.stopped:
        lines.append("· 你说过别再提，我不会再主动提起")
    return "".join(f"\n{line}" for line in lines)


def stats(by_tier: dict[str, int], by_type: dict[str, int], archived: int, learned_week: int, evicted_week: int,
          followups: tuple[int, int, int] = (0, 0, 0)) -> str:
    """``followups``: messages written first (sent, answered) and memories the user said not to bring up."""
    total = sum(by_tier.values())
    tiers_line = "，".join(f"{tier_name(k)} {v}" for k, v in by_tier.items())
    types_line = "，".join(f"{TYPE_NAMES.get(k, k)} {v}" for k, v in by_type.items())
    lines = [f"我记得关于你的 {total} 件事：", f"· {tiers_line}", f"· {types_line}", f"· 已归档 {archived} 条",
             f"· 这周新记住 {learned_week} 条"]
    if evicted_week:
        lines.append(f"· 这周因为记忆太多，清理了 {evicted_week} 条不重要的小事")
    sent, answered, stopped = followups
    if sent or stopped:
        lines.append(f"· 主动问候 {sent} 次，你回复了 {answered} 次" + (f"；别再提 {stopped} 件" if stopped else ""))
    return "\n".join(lines)


def weekly(learned: Sequence[Memory], promoted: int, archived: int, evicted: int) -> str:
    return weekly_text(WeekSummary(list(learned), promoted, archived, evicted), "/memories")


_MARKDOWN = (
    (re.compile(r"\*\*(.+?)\*\*", re.DOTALL), r"\1"),
    (re.compile(r"__(.+?)__", re.DOTALL), r"\1"),
    (re.compile(r"^#{1,6}\s+", re.MULTILINE), ""),
    (re.compile(r"^```[\w-]*\n?|```$", re.MULTILINE), ""),
)


def plain(text: str) -> str:
    """Replies are sent as plain text (the prompt asks for it): markdown the model slips in anyway is
    unwrapped rather than shown as raw ``**``."""
    for pattern, repl in _MARKDOWN:
        text = pattern.sub(repl, text)
    return text
