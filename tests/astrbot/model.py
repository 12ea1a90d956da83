"""The fake model's script for the AstrBot tests: "记住：X" makes it call the save tool with X, "忘掉：X"
the forget tool; a tool result gets a short answer; anything else a plain reply. ``last_prompt`` is what
the model was told on the latest user turn (the plugin's memory block included)."""

from __future__ import annotations

from typing import Any

from companion.hosts.astrbot.texts import BEGIN, END
from tests.fakes.llm import Answer, ToolCallAnswer


def user_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def last_user(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    return user_text(users[-1]) if users else ""


def told(body: dict[str, Any]) -> str:
    """Everything a request holds: system prompt, history, the latest turn, tool results."""
    return "\n".join(user_text(m) for m in body.get("messages") or [])


def saved(said: str) -> str:
    """The words the model stores for what was said: not the said words themselves, so a test can tell a
    memory (which must stay in its scope) from the message (which the group saw anyway)."""
    return f"用户提到：{said}"


def script(body: dict[str, Any]) -> Answer:
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return "好的，记住了。"
    text = last_user(body)
    if '"memories"' in text or "json" in text.lower():
        return '{"memories": [], "today": []}'
    if text.startswith("记住："):
        said = text.removeprefix("记住：").split("\n", 1)[0].strip()
        return ToolCallAnswer([("companion_memory_add", {"content": saved(said), "importance": 8,
                                                         "type": "preference"})])
    if text.startswith("忘掉："):
        said = text.removeprefix("忘掉：").split("\n", 1)[0].strip()
        return ToolCallAnswer([("companion_memory_forget", {"target": said})])
    return "嗯嗯。"


def memory_block(body: dict[str, Any]) -> str:
    """The plugin's memory block in the request's latest user turn ('' when none)."""
    text = last_user(body)
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end] if 0 <= start < end else ""
