"""A scripted model for FakeLLM: extraction answers come from trigger words in the conversation,
profile answers from the lasting memories listed in the prompt, chat answers from a callable."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.llm import FakeLLM, request_text

EXTRACT_MARK = "提取值得长期记住"
PROFILE_MARK = "用户画像"
SUMMARY_MARK = "刚刚结束的一段对话"
SAVE_MARK = "用户的原话："
EXTRACT_PROFILE_MARK = "用户介绍"  # an extraction that also asks for the profile (prompts/extract_profile.md)
PROFILE_MEMORIES = "记忆（"  # the header of the memories a profile prompt lists


@dataclass
class ScriptedBrain:
    """``facts`` maps a trigger word to the memory the extraction call should return when the
    conversation part of the prompt contains it."""

    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    chat: Callable[[dict[str, Any]], str] = lambda body: "嗯嗯，我在听呢。"
    # What a conversation summary (``/reset``) answers: trigger word -> (summary, keywords).
    summaries: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    # How an explicit save ("记住：…") is judged: trigger word -> the judged memory.
    saves: dict[str, dict[str, Any]] = field(default_factory=dict)
    extraction_calls: int = 0
    profile_calls: int = 0

    def install(self, llm: FakeLLM) -> None:
        llm.set_json_reply(self.answer_json)
        llm.set_chat_reply(self.chat)

    def answer_json(self, body: dict[str, Any]) -> str:
        text = request_text(body)
        if PROFILE_MARK in text:
            self.profile_calls += 1
            # Only the listed memories: the prompt's own lines (the layers it explains, the format example)
            # are no facts about the user and must never reach a profile.
            # The core holds what lasts (the prompt's "长期稳定的属性"): events stay out of it.
            listed = text.split(PROFILE_MEMORIES, 1)[-1]
            lines = [ln[2:].split("（")[0] for ln in listed.splitlines()
                     if ln.startswith("- ") and not ln.endswith("，event）")]
            return json.dumps({"core": "；".join(lines)[:120], "dynamic": []}, ensure_ascii=False)
        if SAVE_MARK in text:
            words = text.split(SAVE_MARK, 1)[-1]
            return json.dumps(next((m for word, m in self.saves.items() if word in words), {}), ensure_ascii=False)
        if SUMMARY_MARK in text:
            dialogue = text.split("对话：", 1)[-1]
            said = next((found for word, found in self.summaries.items() if word in dialogue), ("", []))
            return json.dumps({"summary": said[0], "keywords": said[1]}, ensure_ascii=False)
        if EXTRACT_MARK in text:
            self.extraction_calls += 1
            dialogue = text.split("对话：", 1)[-1]
            found = [memory for word, memory in self.facts.items() if word in dialogue]
            return json.dumps({"memories": found}, ensure_ascii=False)
        return json.dumps({"memories": []})


def is_extraction(body: dict[str, Any]) -> bool:
    return EXTRACT_MARK in request_text(body)


# The reply layout (companion/chat/prompt.py): a fixed system message, the history, then the latest
# user message with this turn's reference block (time, profile, recalled memories) before the user's words.
REFERENCE_OPEN = "【参考资料："
REFERENCE_CLOSE = "【参考资料结束】"
MEMORY_HEADER = "可能相关的记忆（仅供参考）："


def system_prompt(body: dict[str, Any]) -> str:
    """The fixed system message of a request (the same every turn)."""
    messages = body.get("messages", [])
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


def latest_user_message(body: dict[str, Any]) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def reference_data(body: dict[str, Any]) -> str:
    """This turn's reference block, markers included; empty when the latest user message has none."""
    text = latest_user_message(body)
    start, end = text.find(REFERENCE_OPEN), text.find(REFERENCE_CLOSE)
    return text[start:end + len(REFERENCE_CLOSE)] if start == 0 and end > 0 else ""


def user_words(content: str) -> str:
    """A user message without the reference block the latest one carries."""
    if content.startswith(REFERENCE_OPEN) and REFERENCE_CLOSE in content:
        return content.split(REFERENCE_CLOSE, 1)[1].lstrip("\n")
    return content


def model_context(body: dict[str, Any]) -> str:
    """What a reply call tells the model besides the conversation: instructions plus reference data."""
    return f"{system_prompt(body)}\n{reference_data(body)}"


def recalled_events(body: dict[str, Any]) -> list[str]:
    """The recalled memories of a reply call, unquoted, in the order given."""
    block = reference_data(body)
    if MEMORY_HEADER not in block:
        return []
    events: list[str] = []
    for line in block.split(MEMORY_HEADER, 1)[1].splitlines()[1:]:
        if not line.startswith("- "):
            break  # the next section (the user's standing instructions) or the end of the block
        events.append(json.loads(line[2:]))
    return events


COLD = {"event": "2025-12-23 感冒发烧，身体不舒服", "keywords": ["感冒", "发烧", "不舒服"],
        "importance": 85, "validity": "30d", "type": "event"}
