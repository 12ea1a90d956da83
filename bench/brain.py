"""A scripted model behind FakeLLM for the bot and cost benchmarks: instant, deterministic answers
shaped like DeepSeek's (reply lengths of a companion, extraction JSON, profile JSON)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.llm import FakeLLM, ToolCallAnswer, request_text
from tests.scripted import (
    EXTRACT_MARK,
    EXTRACT_PROFILE_MARK,
    PROFILE_MARK,
    latest_user_message,
    recalled_events,
    user_words,
)

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}\s*")
_PROFILE_LINE = re.compile(r"^- (.*)（重要程度 [\d.]+，(\w+)）$")
CORE_CHARS = 120
SEARCH_WORDS = ("记得", "还记")
SAVE_WORDS = ("记住", "别忘了")

# Replies of the length the system prompt asks for (up to three sentences), so history and
# completion sizes in the cost report are realistic.
REPLIES = (
    "嗯嗯，我在听呢。听起来今天过得挺充实的，累了就歇一会儿，别太勉强自己哦。",
    "哈哈，你这么一说我也想试试了！下次有什么新鲜事记得告诉我呀。",
    "抱抱你～这种时候确实会有点难受，慢慢来，我一直都在。",
    "真不错！能感觉到你挺开心的，我也替你高兴。后来怎么样了？",
    "原来是这样呀。换作是我可能也会这么想，你已经做得很好了。",
    "好呀好呀，那你先去忙，忙完了再来找我聊天～",
    "听你这么说，我觉得可以先别急着做决定，多给自己一点时间想想。",
    "哇，这个我还真不太了解，你给我讲讲呗？",
)


@dataclass
class ScriptedModel:
    """``facts`` maps a trigger word to the memory extraction returns when a user line contains it."""

    facts: Mapping[str, dict[str, Any]]
    replies: tuple[str, ...] = REPLIES
    counts: dict[str, int] = field(default_factory=lambda: {"reply": 0, "extraction": 0, "profile": 0})
    record: bool = False  # keep every answer (purpose, text) for size accounting
    answers: list[tuple[str, str]] = field(default_factory=list)

    def install(self, llm: FakeLLM) -> None:
        llm.set_json_reply(self.answer_json)
        llm.set_chat_reply(self.answer_chat)

    def answer_chat(self, body: dict[str, Any]) -> str | ToolCallAnswer:
        """Like a real companion: a reply to the turn, bringing up a recalled memory when there is one;
        with tools offered, first a tool call when the user asks to be remembered or asks what it recalls."""
        call = wants_tool(user_words(latest_user_message(body)))
        if call and body.get("tools") and body.get("tool_choice") != "none" and body["messages"][-1]["role"] == "user":
            self._answer("reply", json.dumps(call, ensure_ascii=False))
            return ToolCallAnswer([call])
        self.counts["reply"] += 1
        base = self.replies[self.counts["reply"] % len(self.replies)]
        events = recalled_events(body)
        fact = self._by_event(events[0]) if events else None
        return self._answer("reply", f"{fact['keywords'][0]}的事我一直记着呢。{base}" if fact else base)

    def answer_json(self, body: dict[str, Any]) -> str:
        text = request_text(body)
        if PROFILE_MARK in text:
            self.counts["profile"] += 1
            return self._answer("profile", json.dumps(self._profile(text), ensure_ascii=False))
        if EXTRACT_MARK in text:
            self.counts["extraction"] += 1
            dialogue = text.split("对话：", 1)[-1]
            said = "\n".join(line for line in dialogue.splitlines() if "用户：" in line)
            found = [memory for word, memory in self.facts.items() if word in said]
            answer: dict[str, Any] = {"memories": found}
            if EXTRACT_PROFILE_MARK in text:  # the profile too, from the stored memories and what it learns now
                self.counts["profile"] += 1
                learned = [f"- {m['event']}（重要程度 {m['importance']}，{m['type']}）" for m in found]
                answer["profile"] = self._profile("\n".join([*learned, *text.split("对话：", 1)[0].splitlines()]))
            return self._answer("extraction", json.dumps(answer, ensure_ascii=False))
        return json.dumps({"memories": []})

    def _answer(self, purpose: str, text: str) -> str:
        if self.record:
            self.answers.append((purpose, text))
        return text

    def _by_event(self, event: str) -> dict[str, Any] | None:
        plain = _DATE.sub("", event.strip())
        return next((f for f in self.facts.values() if f["event"] == plain), None)

    def _profile(self, prompt: str) -> dict[str, Any]:
        """Lasting facts go to the core, recent events to dynamic traits with their keywords."""
        core: list[str] = []
        dynamic: list[dict[str, Any]] = []
        for line in prompt.splitlines():
            match = _PROFILE_LINE.match(line.strip())
            if not match:
                continue
            event = _DATE.sub("", match[1])
            fact = self._by_event(event)
            if match[2] == "event" and fact is not None:
                dynamic.append({"text": event, "keywords": fact["keywords"]})
            else:
                core.append(event)
        return {"core": "；".join(dict.fromkeys(core))[:CORE_CHARS], "dynamic": dynamic}


def wants_tool(user_text: str) -> tuple[str, dict[str, Any]] | None:
    """The memory tool call a companion model would make for this user turn, if any (the scripted
    model's rule): a save when asked to remember, a search when asked what it remembers."""
    if any(word in user_text for word in SAVE_WORDS):
        return "save_memory", {"content": user_text[:200], "importance": 70}
    if any(word in user_text for word in SEARCH_WORDS):
        return "search_memories", {"query": user_text[:100]}
    return None
