"""What the admin commands say (Chinese, for operators in Telegram), and the parsing of their
arguments. Pure functions: the handlers only call these and send the result."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import tzinfo

from companion.core.csvformat import LABELS
from companion.core.models import Memory, MemoryType, Status, Tier, Validity
from companion.core.timeutil import show
from companion.core.usage import UsageCell
from companion.ops.admin.admin_service import HISTOGRAM, AdminStats, UserSummary

NO_PERMISSION = "没有权限"
PRIVATE_ONLY = "管理命令只在和我的私聊里回答，请私聊我再发。"
USAGE = {
    "mem_add": "用法：/mem_add 用户ID 内容 [重要程度0-100] [有效期 permanent|30d|7d]",
    "mem_del": "用法：/mem_del 用户ID 记忆编号",
    "mem_edit": "用法：/mem_edit 用户ID 记忆编号 新内容 [重要程度0-100]",
    "mem_export": "用法：/mem_export [用户ID] [关键词]",
    "mem_user": "用法：/mem_user 用户ID",
}
NOT_FOUND = "没有这条记忆。"
NOT_THIS_USER = "这条记忆不属于这个用户，什么都没改。"
NOTHING_TO_EXPORT = "没有符合条件的记忆。"
_VALIDITY_WORDS = {**{v.value: v for v in Validity}, "永久": Validity.PERMANENT, "30天": Validity.DAYS_30,
                   "7天": Validity.DAYS_7}
_ID = re.compile(r"\d{1,16}")


class UsageError(ValueError):
    """The command's arguments do not parse; the message is the command's usage line."""


@dataclass(frozen=True, slots=True)
class AddArgs:
    user_id: int
    content: str
    importance: float | None
    validity: Validity


@dataclass(frozen=True, slots=True)
class EditArgs:
    user_id: int
    handle: int
    content: str
    importance: float | None


def _id(token: str, command: str) -> int:
    if not _ID.fullmatch(token) or int(token) == 0:
        raise UsageError(USAGE[command])
    return int(token)


def _importance(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if 0 <= value <= 100 else None


def parse_add(args: str | None) -> AddArgs:
    words = (args or "").split()
    if len(words) < 2:
        raise UsageError(USAGE["mem_add"])
    user_id, rest = _id(words[0], "mem_add"), words[1:]
    validity = Validity.DAYS_30
    if len(rest) > 1 and rest[-1].lower() in _VALIDITY_WORDS:
        validity = _VALIDITY_WORDS[rest.pop().lower()]
    importance = _importance(rest[-1]) if len(rest) > 1 else None
    if importance is not None:
        rest.pop()
    return AddArgs(user_id, " ".join(rest), importance, validity)


def parse_handle(args: str | None, command: str) -> tuple[int, int]:
    words = (args or "").split()
    if len(words) != 2:
        raise UsageError(USAGE[command])
    return _id(words[0], command), _id(words[1], command)


def parse_edit(args: str | None) -> EditArgs:
    words = (args or "").split()
    if len(words) < 3:
        raise UsageError(USAGE["mem_edit"])
    user_id, handle, rest = _id(words[0], "mem_edit"), _id(words[1], "mem_edit"), words[2:]
    importance = _importance(rest[-1]) if len(rest) > 1 else None
    if importance is not None:
        rest.pop()
    return EditArgs(user_id, handle, " ".join(rest), importance)


def parse_export(args: str | None) -> tuple[int | None, str | None]:
    words = (args or "").split(maxsplit=1)
    if not words:
        return None, None
    if _ID.fullmatch(words[0]):
        return int(words[0]), (words[1] if len(words) > 1 else None)
    return None, " ".join(words)


def parse_user(args: str | None) -> int:
    words = (args or "").split()
    if len(words) != 1:
        raise UsageError(USAGE["mem_user"])
    return _id(words[0], "mem_user")


def _label(kind: type[Tier] | type[MemoryType] | type[Status] | type[Validity], value: str) -> str:
    return LABELS[kind][value]


def memory_line(memory: Memory) -> str:
    return (f"#{memory.id} [{_label(Tier, memory.tier.value)}·{_label(MemoryType, memory.type.value)}·"
            f"{memory.importance:.0f}] {memory.shown}")


def added(user_id: int, memory: Memory) -> str:
    return f"已给用户 {user_id} 加上：\n{memory_line(memory)}"


def deleted(user_id: int, handle: int, count: int) -> str:
    return f"已删除用户 {user_id} 的记忆 #{handle}。" if count else NOT_FOUND


def edited(user_id: int, memory: Memory) -> str:
    return f"已修改用户 {user_id} 的记忆：\n{memory_line(memory)}"


def exported(count: int) -> str:
    return f"导出 {count} 条记忆（Excel 可直接打开）。"


def user_summary(summary: UserSummary, tz: tzinfo) -> str:
    if not summary.scopes:
        return f"用户 {summary.user_id} 还没有任何记忆。"
    tiers = "，".join(f"{_label(Tier, t.value)} {n}" for t, n in summary.by_tier.items())
    types = "，".join(f"{_label(MemoryType, t.value)} {n}" for t, n in summary.by_type.items() if n)
    last = show(summary.last_learned, tz) if summary.last_learned else "—"
    return "\n".join([
        f"用户 {summary.user_id}（{len(summary.scopes)} 个范围：{'、'.join(summary.scopes)}）",
        f"有效记忆 {summary.active} 条：{tiers}",
        f"类型：{types or '—'}",
        f"已归档 {summary.archived}，已遗忘 {summary.forgotten}",
        f"最近一次记住：{last}",
    ])


# What each LLM call was for (the ``purpose`` the engine logs); a purpose not listed shows as logged.
PURPOSE_LABELS: Mapping[str, str] = {"reply": "回复", "extraction": "提取", "save": "保存", "summary": "小结",
                                     "profile": "画像", "followup": "问候"}


def purpose_label(purpose: str) -> str:
    return PURPOSE_LABELS.get(purpose, purpose)


def usage_lines(cells: list[UsageCell]) -> list[str]:
    if not cells:
        return ["最近7天没有模型调用记录。"]
    lines = []
    for day in sorted({c.day for c in cells}):
        parts = []
        for c in (c for c in cells if c.day == day):
            parts.append(f"{purpose_label(c.purpose)} {c.calls}次/{c.prompt_tokens + c.completion_tokens}词元"
                         f"(缓存{c.cache_hit_tokens}，未缓存{c.prompt_tokens - c.cache_hit_tokens}，"
                         f"{c.avg_latency_ms:.0f}ms)")
        lines.append(f"{day}：" + "；".join(parts))
    return lines


NO_CHART = "（每天词元的图表需要 matplotlib：pip install 'matplotlib~=3.11'）"
MAX_MESSAGE = 4000  # Telegram's limit is 4096 UTF-16 units; the chart carries the rest


def admin_stats(stats: AdminStats) -> str:
    tiers = "，".join(f"{_label(Tier, t.value)} {stats.by_tier[t]}" for t in Tier)
    types = "，".join(f"{_label(MemoryType, t.value)} {stats.by_type[t]}" for t in MemoryType)
    histogram = "，".join(f"{lo}-{min(hi, 100)}: {n}" for (lo, hi), n in zip(HISTOGRAM, stats.importance, strict=True))
    calls = sum(c.calls for c in stats.usage)
    tokens = sum(c.prompt_tokens + c.completion_tokens for c in stats.usage)
    cached = sum(c.cache_hit_tokens for c in stats.usage)
    extraction_calls = sum(c.calls for c in stats.usage if c.purpose == "extraction")
    text = "\n".join([
        f"{stats.users} 位用户（{stats.scopes} 个范围）",
        f"有效记忆按层级：{tiers}",
        f"按类型：{types}",
        f"重要程度分布：{histogram}",
        f"已归档 {stats.by_status[Status.ARCHIVED]}，已取代 {stats.by_status[Status.SUPERSEDED]}，"
        f"已遗忘 {stats.by_status[Status.FORGOTTEN]}",
        f"提取：对话提取的记忆 {stats.extracted} 条，最近7天提取调用 {extraction_calls} 次",
        f"召回：被召回或查看 {stats.recalls} 次，回复中提到 {stats.mentions} 次",
        f"主动问候：发出 {stats.followups.get('sent', 0)} 次，得到回复 {stats.followups.get('answered', 0)} 次，"
        f"被要求别再提 {stats.followups.get('stopped', 0)} 件",
        f"最近7天模型调用 {calls} 次，共 {tokens} 词元（其中缓存命中 {cached}）",
        *usage_lines(stats.usage),
    ])
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
