"""``python -m bench path``: one private message followed through the real bot. Beside the benchmark's own
working, the run checks what the import graph cannot: that at run time no call from above the engine lands
in the store (an object handed up would pass ``tests/test_layers.py``), and that the path is the real one."""

from __future__ import annotations

import asyncio

import pytest

from bench.path import follow, layer_of
from tests.test_layers import LAYERS


@pytest.fixture(scope="module")
def report() -> dict[str, object]:
    return asyncio.run(follow("off"))  # its own loop: the profile sees one message of the bot alone


def _files(report: dict[str, object]) -> set[str]:
    layers = report["files_by_layer"]
    assert isinstance(layers, dict)
    return {path for paths in layers.values() for path in paths}


def test_the_path_is_the_bot_s_own_way_from_the_handler_to_the_store(report: dict[str, object]) -> None:
    files = _files(report)
    assert {"handlers/chat.py", "companion/chat/pipeline.py", "memory.py", "companion/engine/context.py",
            "companion/storage/sqlite/turn.py", "companion/llm/client.py", "companion/chat/prompt.py"} <= files
    assert not {path for path in files if path.startswith(("tests/", "bench/", ".venv/"))}
    assert report["files"] == len(files)
    assert isinstance(report["returns_to_a_higher_layer"], int) and report["returns_to_a_higher_layer"] > 0


def test_no_call_from_above_the_engine_lands_in_the_store(report: dict[str, object]) -> None:
    calls = report["calls_down"]
    assert isinstance(calls, list) and calls
    pairs = [(caller.split(":")[0], callee.split(":")[0]) for caller, callee in (c.split(" -> ") for c in calls)]
    into_the_store = [(a, b) for a, b in pairs if b.startswith("companion/storage/")]
    assert into_the_store, "the turn's read and write are calls into the store: the profile must see them"
    above = [(a, b) for a, b in into_the_store if layer_of(a) > LAYERS["memory"]]
    assert above == []
