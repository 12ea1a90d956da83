"""Tools from typed functions: schema from the signature and docstring, validated arguments, bounded
results, and a dispatcher that answers every failure with an error the model reads."""

from __future__ import annotations

import json
import logging
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from annotated_types import Len
from pydantic import Field

from companion.core.models import Scope
from companion.llm.client import ToolCall
from companion.llm.toolkit import ResultBounds, Tool, ToolError, Toolset, bound_result, parse_docstring

Importance = Annotated[int, Field(ge=0, le=100)]
Content = Annotated[str, Len(1, 50)]
Kind = Literal["fact", "event", "preference"]


class Tier(StrEnum):
    CORE = "core"
    ARCHIVE = "archive"


async def save_memory(content: Content, kind: Kind = "fact", importance: Importance = 50,
                      tags: list[str] | None = None, tier: Tier = Tier.CORE, urgent: bool = False,
                      weight: float = 1.0) -> dict[str, Any]:
    """Save one thing worth remembering about the user.

    Args:
        content: what to remember, one short sentence.
        kind: what sort of memory it is.
        importance: how much it matters,
            from 0 (trivia) to 100 (health, safety).
        tags: optional keywords.
    """
    return {"saved": content, "kind": kind, "importance": importance, "tags": tags, "tier": tier,
            "urgent": urgent, "weight": weight}


def call(name: str, arguments: dict[str, Any] | str, id_: str = "call_1") -> ToolCall:
    return ToolCall(id_, name, arguments if isinstance(arguments, str) else json.dumps(arguments))


def test_schema_comes_from_signature_and_docstring() -> None:
    tool = Tool.function(save_memory)
    assert tool.description == "Save one thing worth remembering about the user."
    schema = tool.parameters
    assert schema["type"] == "object" and schema["required"] == ["content"]
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["content"] == {"type": "string", "minLength": 1, "maxLength": 50,
                                "description": "what to remember, one short sentence."}
    assert props["kind"] == {"type": "string", "enum": ["fact", "event", "preference"], "default": "fact",
                             "description": "what sort of memory it is."}
    assert props["importance"]["minimum"] == 0 and props["importance"]["maximum"] == 100
    assert props["importance"]["description"] == "how much it matters, from 0 (trivia) to 100 (health, safety)."
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "optional keywords."}
    assert props["tier"] == {"type": "string", "enum": ["core", "archive"], "default": "core"}
    assert props["urgent"] == {"type": "boolean", "default": False}
    assert props["weight"] == {"type": "number", "default": 1.0}
    assert "title" not in json.dumps(schema) and "$defs" not in schema
    assert tool.spec() == {"type": "function", "function": {"name": "save_memory", "description": tool.description,
                                                           "parameters": schema}}


def test_a_tool_needs_a_description_annotations_and_a_valid_name() -> None:
    async def bare(x: int) -> int:
        return x

    def untyped(x) -> int:
        """Untyped."""
        return 1

    with pytest.raises(TypeError, match="docstring"):
        Tool.function(bare)
    assert Tool.function(bare, description="Echo a number.").description == "Echo a number."
    with pytest.raises(TypeError, match="annotation"):
        Tool.function(untyped)
    with pytest.raises(TypeError, match="name"):
        Tool.function(save_memory, name="save memory!")
    with pytest.raises(ValueError, match="two tools"):
        Toolset([Tool.function(save_memory), Tool.function(save_memory)])


@pytest.mark.parametrize(("doc", "summary", "params"), [
    ("Just a line.", "Just a line.", {}),
    ("Two\nlines.\n\nArgs:\n    a: first\n    b (int): second\n        continued\n\nReturns:\n    x: not a param",
     "Two\nlines.", {"a": "first", "b": "second continued"}),
    ("", "", {}),
])
def test_parse_docstring(doc: str, summary: str, params: dict[str, str]) -> None:
    assert parse_docstring(doc) == (summary, params)


async def test_valid_call_runs_with_typed_arguments() -> None:
    tools = Toolset([Tool.function(save_memory)])
    arguments = {"content": "对花生过敏", "importance": "90", "tier": "archive"}
    outcome = await tools.dispatch(call("save_memory", arguments))
    assert outcome.ok
    assert json.loads(outcome.content) == {"saved": "对花生过敏", "kind": "fact", "importance": 90, "tags": None,
                                           "tier": "archive", "urgent": False, "weight": 1.0}
    assert outcome.message() == {"role": "tool", "tool_call_id": "call_1", "content": outcome.content}


@pytest.mark.parametrize(("arguments", "error", "argument"), [
    ({"content": ""}, "invalid arguments", "content"),
    ({"content": "长" * 51}, "invalid arguments", "content"),
    ({"content": "x", "importance": 101}, "invalid arguments", "importance"),
    ({"content": "x", "importance": -1}, "invalid arguments", "importance"),
    ({"content": "x", "kind": "secret"}, "invalid arguments", "kind"),
    ({"content": "x", "tags": "not-a-list"}, "invalid arguments", "tags"),
    ({"importance": 3}, "invalid arguments", "content"),
    ({"content": "x", "user_id": 42}, "invalid arguments", "user_id"),
    ({"content": "x", "table": "mem_u42"}, "invalid arguments", "table"),
    ('{"content": "x"', "arguments are not valid JSON", None),
    ('["x"]', "arguments must be a JSON object", None),
])
async def test_bad_arguments_become_an_error_for_the_model(
    arguments: dict[str, Any] | str, error: str, argument: str | None
) -> None:
    ran: list[object] = []

    async def spy(content: Content, importance: Importance = 50, kind: Kind = "fact",
                  tags: list[str] | None = None) -> str:
        """Spy."""
        ran.append(content)
        return "ok"

    outcome = await Toolset([Tool.function(spy, name="save_memory")]).dispatch(call("save_memory", arguments))
    body = json.loads(outcome.content)
    assert not outcome.ok and body["error"] == error and not ran
    if argument is not None:
        assert argument in [p["argument"] for p in body["problems"]]


async def test_unknown_tool_tool_errors_and_crashes_are_answered(caplog: pytest.LogCaptureFixture) -> None:
    async def not_found(handle: str) -> str:
        """Look a memory up."""
        raise ToolError(f"no memory {handle} here")

    async def broken() -> str:
        """Always fails."""
        raise RuntimeError("bug")

    tools = Toolset([Tool.function(not_found), Tool.function(broken)])
    unknown = await tools.dispatch(call("delete_everything", {}))
    assert json.loads(unknown.content) == {"error": "unknown tool 'delete_everything'",
                                           "tools": ["not_found", "broken"]}
    missing = await tools.dispatch(call("not_found", {"handle": "m9"}))
    assert json.loads(missing.content) == {"error": "no memory m9 here"}
    with caplog.at_level(logging.ERROR):
        crashed = await tools.dispatch(call("broken", ""))
    assert not crashed.ok and "failed unexpectedly" in json.loads(crashed.content)["error"]
    assert [r.exc_info is not None for r in caplog.records] == [True], "the traceback is logged exactly once"


def test_scope_is_bound_by_the_factory_not_by_arguments() -> None:
    def factory(scope: Scope) -> list[Tool]:
        async def whose() -> int:
            """Whose memories these tools see."""
            return scope.user_id

        return [Tool.function(whose)]

    first, second = factory(Scope(1))[0], factory(Scope(2))[0]
    assert first.parameters == second.parameters == {"type": "object", "properties": {},
                                                     "additionalProperties": False}
    assert first.arguments is second.arguments, "closures from one function share one cached schema"


async def test_closures_run_with_their_own_scope() -> None:
    def factory(scope: Scope) -> Toolset:
        async def whose() -> int:
            """Whose memories these tools see."""
            return scope.user_id

        return Toolset([Tool.function(whose)])

    assert (await factory(Scope(7)).dispatch(call("whose", "{}"))).content == "7"
    forged = await factory(Scope(7)).dispatch(call("whose", {"user_id": 8}))
    assert not forged.ok and json.loads(forged.content)["problems"][0]["argument"] == "user_id"


@pytest.mark.parametrize(("value", "bounds", "expected"), [
    ({"a": 1}, ResultBounds(), {"a": 1}),
    (list(range(30)), ResultBounds(max_items=3), {"result": [0, 1, 2], "truncated": True}),
    ({"items": ["x" * 10]}, ResultBounds(max_string=4), {"items": ["xxx…"], "truncated": True}),
    ("短", ResultBounds(), "短"),
])
def test_bound_result_table(value: Any, bounds: ResultBounds, expected: Any) -> None:
    assert json.loads(bound_result(value, bounds)) == expected


def test_bound_result_always_fits_and_stays_json() -> None:
    many = [{"handle": f"m{i}", "content": "记忆" * 100} for i in range(200)]
    for max_chars in (30, 200, 1000, 4000):
        text = bound_result(many, ResultBounds(max_chars=max_chars))
        assert len(text) <= max_chars
        assert json.loads(text)["truncated"] is True
    with pytest.raises(TypeError, match="JSON"):
        bound_result(object(), ResultBounds())


def test_a_tool_sets_definitions_are_encoded_once_across_turns() -> None:
    """Tools are made per turn for their scope, their definitions once: the same tools give the same
    ``JsonArray`` (encoded once), another set (a group's safe subset) its own."""
    def factory(scope: Scope) -> list[Tool]:
        async def whose() -> int:
            """Whose memories these tools see."""
            return scope.user_id

        return [Tool.function(save_memory), Tool.function(whose, group_safe=True)]

    first, second = Toolset(factory(Scope(1))).specs(), Toolset(factory(Scope(2))).specs()
    assert first is second
    assert json.loads(first.json) == [tool.spec() for tool in factory(Scope(3))]
    safe = Toolset(t for t in factory(Scope(1)) if t.group_safe).specs()
    assert safe is not first and [s["function"]["name"] for s in safe] == ["whose"]
    renamed = Toolset([Tool.function(save_memory, description="另一个说明")]).specs()
    assert renamed[0]["function"]["description"] == "另一个说明"
