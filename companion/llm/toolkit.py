"""Function tools for the model, made from typed Python functions.

``Tool.function(fn)`` reads the function's signature and docstring: the docstring's first part becomes
the tool's description, its ``Args:`` lines the parameters' descriptions; each parameter's annotation
and default become a field of a pydantic model, which both produces the JSON schema sent to the model
and validates the model's arguments. Types: ``str``, ``int``, ``float``, ``bool``, ``Literal[...]`` or an
``Enum``, ``list[str]``, ``X | None``; limits through ``typing.Annotated`` metadata, e.g.
``Annotated[int, Field(ge=0, le=100)]`` or ``Annotated[str, annotated_types.Len(1, 200)]``. Unknown
arguments are refused (``extra="forbid"``).

Binding to a scope happens in code, never in arguments. Tools are built per reply call by a
``ToolFactory`` that receives the caller's ``Scope`` and returns closures over it (the memory tools,
``companion/engine/tools.py``, are made so)::

    def memory_tools(engine: ToolEngine) -> ToolFactory:
        def build(scope: Scope) -> list[Tool]:
            async def forget_memory(handle: Handle) -> dict[str, object]:
                '''Forget one memory of this user.

                Args:
                    handle: the memory's handle, as search_memories showed it.
                '''
                return {"forgotten": await engine.forget(scope, [handle])}
            return [Tool.function(forget_memory)]
        return build

No parameter names a user, chat or table, so no argument can reach another user's memories: a call
that tries (``{"handle": "m1", "user_id": 42}``) fails validation, and a handle of another scope is
simply not found in this one. Annotations are resolved against the defining module's globals, so
aliases such as ``Handle`` must live at module level. The schema is built once per function code
object and reused by every closure made from it, so building tools per call is cheap.

A call never raises to the caller: ``Toolset.dispatch`` turns unknown tools, broken JSON, invalid
arguments, a ``ToolError`` the implementation raised and any unexpected exception into a tool message
``{"error": ...}`` the model reads. Results are bounded in items and characters (``ResultBounds``).
"""

from __future__ import annotations

import inspect
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import PydanticSerializationError, to_jsonable_python

from companion.core.errors import CompanionError
from companion.core.models import Scope
from companion.llm.client import JsonArray, ToolCall

log = logging.getLogger(__name__)

ToolFunction = Callable[..., Any]  # sync or async; returns JSON-able data (dicts, lists, dataclasses, ...)
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # the API's function-name rule
_SPECS: dict[tuple[tuple[str, str, int], ...], JsonArray] = {}
_SPECS_KEPT = 64
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")


class ToolError(CompanionError):
    """Raised by a tool's implementation for an expected failure (nothing found, not allowed); the
    message goes to the model as ``{"error": message}``, so write it for the model, in plain words."""


@dataclass(frozen=True, slots=True)
class ResultBounds:
    """How much of a result the model sees: lists cut to ``max_items``, strings to ``max_string``
    characters, the whole JSON text to ``max_chars``; anything cut is marked ``"truncated": true``."""

    max_items: int = 20
    max_string: int = 500
    max_chars: int = 4000


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A dispatched call: the tool message content the model gets, and whether the call succeeded."""

    call: ToolCall
    content: str
    ok: bool

    @classmethod
    def error(cls, call: ToolCall, error: str, **details: Any) -> ToolOutcome:
        return cls(call, _dumps({"error": error, **details}), ok=False)

    def message(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.content}


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    arguments: type[BaseModel]
    implementation: ToolFunction
    bounds: ResultBounds = ResultBounds()
    # A tool whose result shows nothing stored beyond what the call itself wrote may be offered where
    # the answer is read by others (a group chat); a tool that lists or reads memories never is.
    group_safe: bool = False

    @classmethod
    def function(
        cls, fn: ToolFunction, *, name: str | None = None, description: str | None = None,
        bounds: ResultBounds = ResultBounds(), group_safe: bool = False,
    ) -> Tool:
        tool_name = name or fn.__name__
        if not _NAME.match(tool_name):
            raise TypeError(f"tool name {tool_name!r} must match {_NAME.pattern}")
        summary, arguments, parameters = _describe(fn, tool_name)
        text = description or summary
        if not text:
            raise TypeError(f"tool {tool_name!r} needs a docstring or a description: the model reads it")
        return cls(tool_name, text, parameters, arguments, fn, bounds, group_safe)

    def spec(self) -> dict[str, Any]:
        """The entry of the request's ``tools`` list."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    async def run(self, arguments: BaseModel) -> Any:
        result = self.implementation(**{key: getattr(arguments, key) for key in type(arguments).model_fields})
        return await result if inspect.isawaitable(result) else result


ToolFactory = Callable[[Scope], Iterable[Tool]]


class Toolset:
    """The tools of one call, by name, with the dispatcher that runs the model's calls."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> JsonArray:
        """The request's ``tools`` list. Tools are built per turn, but their definitions are not: the same
        names, descriptions and schemas give the same ``JsonArray``, encoded once."""
        key = tuple((tool.name, tool.description, id(tool.parameters)) for tool in self._tools.values())
        specs = _SPECS.get(key)
        if specs is None:
            if len(_SPECS) >= _SPECS_KEPT:  # tool sets made on the fly (tests, hosts) must not pile up
                _SPECS.clear()
            # The entry holds each schema, so no id in its key can be reused while it is kept.
            specs = _SPECS[key] = JsonArray([tool.spec() for tool in self._tools.values()])
        return specs

    async def dispatch(self, call: ToolCall) -> ToolOutcome:
        """Run one call. Never raises (except cancellation): every failure is an error the model sees."""
        tool = self._tools.get(call.name)
        if tool is None:
            return ToolOutcome.error(call, f"unknown tool {call.name!r}", tools=self.names)
        try:
            raw = json.loads(call.arguments or "{}")
        except (json.JSONDecodeError, RecursionError):  # nesting past the parser's stack is just as broken
            return ToolOutcome.error(call, "arguments are not valid JSON")
        if not isinstance(raw, dict):
            return ToolOutcome.error(call, "arguments must be a JSON object")
        try:
            arguments = tool.arguments.model_validate(raw)
        except ValidationError as exc:
            return ToolOutcome.error(call, "invalid arguments", problems=_problems(exc))
        try:
            content = bound_result(await tool.run(arguments), tool.bounds)
        except ToolError as exc:
            return ToolOutcome.error(call, str(exc))
        except Exception:  # the dispatcher is an edge: a broken tool must not cost the user a reply
            log.exception("tool %s failed", call.name)
            return ToolOutcome.error(call, "the tool failed unexpectedly; do not call it again this turn")
        return ToolOutcome(call, content, ok=True)


def _problems(exc: ValidationError) -> list[dict[str, str]]:
    return [{"argument": ".".join(str(part) for part in err["loc"]) or "(all)", "problem": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False)]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ---- results -------------------------------------------------------------------------------------

def bound_result(value: Any, bounds: ResultBounds) -> str:
    """The JSON text of a result, within ``bounds``. Lists and strings shrink (halving) until the text
    fits; a result that still does not fit is cut as text, so the model always gets valid JSON."""
    try:
        data = to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise TypeError(f"tool result is not JSON-serialisable: {exc}") from None
    items, chars = bounds.max_items, bounds.max_string
    while True:
        shrunk, omitted = _cap(data, items, chars)
        if omitted:
            shrunk = {**shrunk, "truncated": True} if isinstance(shrunk, dict) else {
                "result": shrunk, "truncated": True}
        text = _dumps(shrunk)
        if len(text) <= bounds.max_chars or (items == 1 and chars <= 20):
            break
        items, chars = max(1, items // 2), max(20, chars // 2)
    if len(text) > bounds.max_chars:
        text = _dumps({"truncated": True, "text": text[: max(bounds.max_chars - 40, 0)]})
    return text


def _cap(value: Any, items: int, chars: int) -> tuple[Any, int]:
    """The value with lists cut to ``items`` and strings to ``chars``; also how many things were cut."""
    if isinstance(value, str):
        return (value, 0) if len(value) <= chars else (value[: chars - 1] + "…", 1)
    if isinstance(value, list):
        kept = [_cap(item, items, chars) for item in value[:items]]
        return [v for v, _ in kept], sum(n for _, n in kept) + max(len(value) - items, 0)
    if isinstance(value, dict):
        capped = {key: _cap(item, items, chars) for key, item in value.items()}
        return {key: v for key, (v, _) in capped.items()}, sum(n for _, n in capped.values())
    return value, 0


# ---- schemas -------------------------------------------------------------------------------------

_SCHEMAS: dict[tuple[object, str], tuple[str, type[BaseModel], dict[str, Any]]] = {}


def _describe(fn: ToolFunction, name: str) -> tuple[str, type[BaseModel], dict[str, Any]]:
    """(description from the docstring, argument model, JSON schema), cached per code object."""
    key = (getattr(fn, "__code__", fn), name)
    cached = _SCHEMAS.get(key)
    if cached is None:
        cached = _SCHEMAS[key] = _build(fn, name)
    return cached


def _build(fn: ToolFunction, name: str) -> tuple[str, type[BaseModel], dict[str, Any]]:
    summary, documented = parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = get_type_hints(fn, include_extras=True)
    except NameError as exc:
        raise TypeError(f"tool {name!r}: annotation not resolvable at module level ({exc})") from None
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind not in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
            raise TypeError(f"tool {name!r}: parameter {pname!r} must be a plain or keyword parameter")
        if pname not in hints:
            raise TypeError(f"tool {name!r}: parameter {pname!r} needs a type annotation")
        default = ... if param.default is param.empty else param.default
        fields[pname] = (hints[pname], Field(default, description=documented.get(pname)))
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return summary, model, clean_schema(model.model_json_schema())


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Google-style docstring: the text before the first section, and ``name: text`` lines of ``Args:``."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section, current, params_indent = None, None, 0
    for line in doc.splitlines():
        header = _SECTION.match(line.strip())
        if header and not line.startswith((" ", "\t")):
            section, current = header[1], None
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters") and line.strip():
            match = re.match(r"^\s*\*{0,2}(\w+)(?:\s*\([^)]*\))?\s*:\s*(.*)$", line)
            if match and (current is None or _indent(line) <= params_indent):
                current, params_indent = match[1], _indent(line)
                params[current] = match[2].strip()
            elif current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
    return "\n".join(summary).strip(), params


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's schema made plain for the model: ``$defs`` inlined, titles dropped, ``X | None`` shown
    as ``X`` (such a parameter is optional anyway: it has a default)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            return walk({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$defs"):
                continue
            if key == "properties":
                out[key] = {prop: walk(sub) for prop, sub in value.items()}
            else:
                out[key] = walk(value)
        options = out.get("anyOf")
        if isinstance(options, list):
            real = [o for o in options if o != {"type": "null"}]
            if len(real) == 1 and len(real) < len(options):
                del out["anyOf"]
                out = {**real[0], **out}
                if out.get("default", 0) is None:
                    del out["default"]
        return out

    cleaned = walk(schema)
    cleaned.setdefault("properties", {})
    return dict(cleaned)
