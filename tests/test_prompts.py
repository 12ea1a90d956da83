"""Prompt files: each renders with exactly its declared inputs; JSON-mode prompts show a valid example."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import prompts
from companion.core.errors import PromptError
from companion.core.extraction import parse_extraction
from companion.engine.profile import parse_profile

# The callers (memory.py, profile.py) pass exactly these; a prompt edit that changes them breaks a call.
DECLARED = {
    "extract": {"today", "known", "turns", "profile"},
    "extract_profile": {"max_chars", "memories"},
    "save": {"today", "text"},
    "profile": {"today", "max_chars", "memories"},
    "system": {"tool_rules"},
    "tools": set(),
    "context": {"now_local", "core_profile", "dynamic_block", "memory_block"},
}
JSON_PROMPTS = ["extract", "profile", "save"]


@pytest.fixture
def fresh_cache() -> Iterator[None]:
    prompts._template.cache_clear()
    yield
    prompts._template.cache_clear()


def sample_values(name: str) -> dict[str, str]:
    return {key: f"<{key}-值>" for key in prompts.inputs(name)}


def test_every_known_prompt_exists() -> None:
    assert set(DECLARED) <= set(prompts.names())


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declared_inputs(name: str) -> None:
    assert prompts.inputs(name) == DECLARED[name]


@pytest.mark.parametrize("name", prompts.names())
def test_every_prompt_renders_with_its_inputs(name: str) -> None:
    values = sample_values(name)
    text = prompts.render(name, **values)
    for value in values.values():
        assert value in text
    assert re.search(r"\$\{?\w", text) is None  # no placeholder left behind
    assert len(text) > 20


@pytest.mark.parametrize("name", [name for name in prompts.names() if prompts.inputs(name)])
def test_missing_input_is_an_error(name: str) -> None:
    values = sample_values(name)
    dropped = sorted(values)[0]
    del values[dropped]
    with pytest.raises(PromptError, match=dropped):
        prompts.render(name, **values)


@pytest.mark.parametrize("name", prompts.names())
def test_unexpected_input_is_an_error(name: str) -> None:
    with pytest.raises(PromptError, match="surprise"):
        prompts.render(name, **sample_values(name), surprise="x")


def test_unknown_prompt_is_an_error() -> None:
    with pytest.raises(PromptError, match="no_such_prompt"):
        prompts.render("no_such_prompt")


def test_values_are_inserted_literally() -> None:
    text = prompts.render("extract", today="$turns", known="（无）", profile="", turns="用户：我有 $5 和 ${today}")
    assert "今天是 $turns。" in text
    assert "用户：我有 $5 和 ${today}" in text


def test_non_string_values_are_rendered_as_text() -> None:
    text = prompts.render("profile", today="2025-12-23", max_chars=200, memories="- 喜欢猫")
    assert "不超过 200 个字" in text


@pytest.mark.parametrize("name", JSON_PROMPTS)
def test_json_prompts_mention_json(name: str) -> None:
    # DeepSeek's JSON mode refuses prompts without the word; LLMClient.json checks it the same way.
    assert "json" in prompts.render(name, **sample_values(name)).lower()


def example_objects(name: str) -> list[dict[str, object]]:
    text = prompts.render(name, **sample_values(name))
    found = [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]
    assert found, f"{name} shows no example object"
    assert all(isinstance(obj, dict) for obj in found)
    return found


def test_extract_example_is_a_valid_extraction() -> None:
    examples = example_objects("extract")
    drafts = [d for obj in examples for d in parse_extraction(obj, lambda text: [], "2025-12-23")]
    assert [d.event for d in drafts] == ["感冒发烧"]
    assert [str(d.happens.on) if d.happens else None for d in drafts] == ["2025-12-23"]
    assert drafts[0].keywords == ["感冒", "生病", "不舒服", "发烧", "咳嗽"]


def test_profile_example_is_a_valid_profile() -> None:
    [example] = example_objects("profile")
    shape = parse_profile(example, guard=False)
    assert shape.core and len(shape.dynamic) == 1 and shape.dynamic[0].keywords
    # A model that answers with the example has said nothing about the user.
    copied = parse_profile(example)
    assert copied.core == "" and copied.dynamic == []


def test_a_stray_dollar_in_a_prompt_file_is_a_prompt_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    (tmp_path / "broken.md").write_text("价格是 $5，今天是 $today", encoding="utf-8")
    (tmp_path / "fine.md").write_text("价格是 $$5，今天是 $today", encoding="utf-8")
    monkeypatch.setattr(prompts, "PROMPT_DIR", tmp_path)
    assert prompts.names() == ["broken", "fine"]
    with pytest.raises(PromptError, match="broken"):
        prompts.render("broken", today="周二")
    assert prompts.render("fine", today="周二") == "价格是 $5，今天是 周二"
