"""The engine's memory tools (``companion.engine.tools``, the Telegram bot's own) as the plugin offers them
to AstrBot's model: their schemas and descriptions are the engine's, their names the plugin's documented
``companion_memory_*`` (AstrBot's personas and its WebUI switch tools on and off by name, and a bare
``save_memory`` could clash with another plugin's). A call runs for the ``Scope`` the host took from the
event, never one an argument names; the result is the engine's JSON, fenced so the next request scrubs it
from the saved history. Nothing here imports astrbot (``main`` wraps each spec in a ``FunctionTool``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from companion.core.models import Scope
from companion.hosts.astrbot.fences import fenced
from companion.llm.client import ToolCall
from companion.llm.toolkit import ToolFactory, Toolset

PREFIX = "companion_memory_"
# The plugin's names for the engine's tools, one to one.
NAMES: dict[str, str] = {
    f"{PREFIX}add": "save_memory",
    f"{PREFIX}search": "search_memories",
    f"{PREFIX}list": "list_memories",
    f"{PREFIX}update": "update_memory",
    f"{PREFIX}forget": "forget_memory",
    f"{PREFIX}move": "move_memory",
    f"{PREFIX}archive": "archive_memory",
    f"{PREFIX}due": "get_due_memories",
}
_ENGINE_NAMES = {engine: host for host, engine in NAMES.items()}
# Only for reading the schemas: a spec never runs, and every call builds its tools for the caller's scope.
_ANY_SCOPE = Scope(1)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as AstrBot's ``FunctionTool`` takes it."""

    name: str
    description: str
    parameters: dict[str, Any]


def specs(factory: ToolFactory) -> list[ToolSpec]:
    """Every engine tool the plugin names, under its plugin name (an engine tool it does not name stays out)."""
    return [ToolSpec(_ENGINE_NAMES[tool.name], tool.description, tool.parameters)
            for tool in factory(_ANY_SCOPE) if tool.name in _ENGINE_NAMES]


async def call(factory: ToolFactory, scope: Scope, name: str, arguments: dict[str, Any]) -> str:
    """Run the tool the plugin calls ``name`` for ``scope``: the engine's dispatcher checks the arguments and
    turns every failure into ``{"error": ...}`` for the model, so this never raises (bar cancellation)."""
    engine_name = NAMES.get(name, name)  # an unknown name reaches the dispatcher, which names the tools
    outcome = await Toolset(factory(scope)).dispatch(
        ToolCall(id=name, name=engine_name, arguments=json.dumps(arguments, ensure_ascii=False, default=str)))
    return fenced(outcome.content)
