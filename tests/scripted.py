"""A scripted model for FakeLLM: extraction answers come from trigger words in the conversation,
profile answers from the memories listed in the prompt, chat answers from a callable."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.llm import FakeLLM, request_text

EXTRACT_MARK = "提取值得长期记住"
PROFILE_MARK = "用户画像"


@dataclass
class ScriptedBrain:
    """``facts`` maps a trigger word to the memory the extraction call should return when the
    conversation part of the prompt contains it."""

    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    chat: Callable[[dict[str, Any]], str] = lambda body: "嗯嗯，我在听呢。"
    extraction_calls: int = 0
    profile_calls: int = 0

    def install(self, llm: FakeLLM) -> None:
        llm.set_json_reply(self.answer_json)
        llm.set_chat_reply(self.chat)

    def answer_json(self, body: dict[str, Any]) -> str:
        text = request_text(body)
        if PROFILE_MARK in text:
            self.profile_calls += 1
            lines = [ln[2:].split("（")[0] for ln in text.splitlines() if ln.startswith("- ")]
            return json.dumps({"core": "；".join(lines)[:120], "dynamic": []}, ensure_ascii=False)
        if EXTRACT_MARK in text:
            self.extraction_calls += 1
            dialogue = text.split("对话：", 1)[-1]
            found = [memory for word, memory in self.facts.items() if word in dialogue]
            return json.dumps({"memories": found}, ensure_ascii=False)
        return json.dumps({"memories": []})


def is_extraction(body: dict[str, Any]) -> bool:
    return EXTRACT_MARK in request_text(body)


def system_prompt(body: dict[str, Any]) -> str:
    messages = body.get("messages", [])
    return str(messages[0]["content"]) if messages and messages[0]["role"] == "system" else ""


COLD = {"event": "2025-12-23 感冒发烧，身体不舒服", "keywords": ["感冒", "发烧", "不舒服"],
        "importance": 85, "validity": "30d", "type": "event"}
