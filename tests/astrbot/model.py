"""The fake model's script for the AstrBot tests: "记住：X" makes it call the save tool with X, "忘掉：X"
the forget tool; a tool result gets a short answer; a profile request a profile naming the memories it was
shown (after ``PROFILE``); anything else a plain reply. Learning and profile calls are told apart from the
replies by ``is_job``; ``reply_to`` is the latest request that asked for a reply."""

from __future__ import annotations

import json
from typing import Any

from companion.hosts.astrbot.replies import BEGIN, END
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


PROFILE = "画像："


def is_job(body: dict[str, Any]) -> bool:
    """A learning or profile call (their prompts ask for JSON), not a reply to a user."""
    text = last_user(body)
    return '"memories"' in text or "json" in text.lower()


def reply_to(requests: list[dict[str, Any]]) -> dict[str, Any]:
    return [r for r in requests if not is_job(r)][-1]


def profile_of(text: str) -> str:
    """The profile the fake model writes: the memory lines it was shown, their notes cut."""
    memories = text.split("记忆（最要紧的在前）：", 1)[-1]
    shown = [line.removeprefix("- ").split("（重要程度", 1)[0]
             for line in memories.splitlines() if line.startswith("- ")]
    return json.dumps({"core": PROFILE + "；".join(shown), "dynamic": []}, ensure_ascii=False)


def script(body: dict[str, Any]) -> Answer:
    messages = body.get("messages") or []
    if messages and messages[-1].get("role") == "tool":
        return "好的，记住了。"
    text = last_user(body)
    if "用户画像" in text:
        return profile_of(text)
    if is_job(body):
        return '{"memories": [], "today": []}'
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if text.startswith("记住：") and "companion_memory_add" in offered:  # a model calls only what it is offered
        said = text.removeprefix("记住：").split("\n", 1)[0].strip()
        return ToolCallAnswer([("companion_memory_add", {"content": saved(said), "importance": 80,
                                                         "type": "preference"})])
    if text.startswith("忘掉：") and "companion_memory_forget" in offered:
        said = text.removeprefix("忘掉：").split("\n", 1)[0].strip()
        return ToolCallAnswer([("companion_memory_forget", {"description": said})])
    return "嗯嗯。"


def memory_block(body: dict[str, Any]) -> str:
    """The plugin's memory block in the request's latest user turn ('' when none)."""
    text = last_user(body)
    start, end = text.find(BEGIN), text.find(END)
    return text[start:end] if 0 <= start < end else ""
