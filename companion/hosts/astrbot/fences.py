"""The fences around what the plugin puts into a request, and their removal from the saved history."""

from __future__ import annotations

from typing import Any

from companion.hosts.astrbot.replies import BEGIN, END


def scrub(contexts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history without anything the plugin put into an earlier request (memory blocks, tool results)."""
    cleaned: list[dict[str, Any]] = []
    for message in contexts:
        content = message.get("content")
        if isinstance(content, str) and BEGIN in content:
            message = {**message, "content": _cut(content)}
        elif isinstance(content, list):
            parts = [p for p in content if not (isinstance(p, dict) and BEGIN in str(p.get("text", "")))]
            message = {**message, "content": parts}
        cleaned.append(message)
    return cleaned


def _cut(text: str) -> str:
    while (start := text.find(BEGIN)) >= 0:
        end = text.find(END, start)
        text = text[:start] + (text[end + len(END):] if end >= 0 else "")
    return text.strip() or "（已省略）"


def fenced(body: str) -> str:
    return f"{BEGIN}\n{body}\n{END}"
