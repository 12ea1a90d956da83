"""The bounds of what a tool call or a command may pass: the designs' 1-10 importance, lifetimes in
seconds, memory types, content length, handles. A value out of bounds is ``BadArgument``, whose message
(Chinese) goes back to the model or the admin."""

from __future__ import annotations

from companion.core.models import MemoryType

MAX_CONTENT = 500


class BadArgument(ValueError):
    """A tool or command argument out of bounds; the message says which (shown to the model or admin)."""


def importance_of(value: object, default: float = 5) -> float:
    """The designs' 1-10 importance as the engine's 0-100."""
    try:
        number = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else default
    except ValueError:
        raise BadArgument("importance 应为 1-10 的数字") from None
    if not 1 <= number <= 10:
        raise BadArgument("importance 应为 1-10")
    return number * 10


def seconds_of(value: object) -> int:
    try:
        number = int(float(value)) if isinstance(value, int | float | str) and not isinstance(value, bool) else 0
    except ValueError:
        raise BadArgument("valid_time 应为秒数") from None
    if number < 0 or number > 100 * 365 * 86400:
        raise BadArgument("valid_time 应在 0 到 100 年之间（秒）")
    return number


def type_of(value: object) -> MemoryType:
    try:
        return MemoryType(str(value or "fact").strip().lower())
    except ValueError:
        raise BadArgument("type 应为 preference / fact / instruction / event") from None


def content_of(value: object) -> str:
    text = " ".join(str(value or "").split())
    if not text:
        raise BadArgument("content 不能为空")
    if len(text) > MAX_CONTENT:
        raise BadArgument(f"content 最多 {MAX_CONTENT} 字")
    return text


def handle_of(value: object) -> int:
    try:
        number = int(str(value).strip().lstrip("#"))
    except ValueError:
        raise BadArgument("id 应为记忆编号") from None
    if number <= 0:
        raise BadArgument("id 应为记忆编号")
    return number
