"""The log an operator reads: third-party chatter stays out of it at INFO (the chart library's font lines, the
HTTP clients' request lines, which would carry the bot's token)."""

from __future__ import annotations

import logging

import pytest

from companion.config.logs import setup_logging
from companion.ops.admin.chart import usage_png


@pytest.fixture(autouse=True)
def root_at_info() -> object:
    """The bot's root logger at INFO, as ``setup_logging`` leaves it outside pytest (whose own handlers make
    ``basicConfig`` a no-op); the noisy loggers' levels are put back after."""
    root = logging.getLogger()
    names = ("matplotlib", "PIL", "httpx", "openai", "aiogram.event")
    before = root.level, {n: logging.getLogger(n).level for n in names}
    root.setLevel(logging.INFO)
    yield
    root.setLevel(before[0])
    for name, level in before[1].items():
        logging.getLogger(name).setLevel(level)


def test_a_chart_writes_nothing_to_the_log_at_info(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("matplotlib")
    setup_logging("INFO")
    with caplog.at_level(logging.INFO):
        logging.getLogger("matplotlib.font_manager").info("generated new fontManager")  # what a first chart says
        assert usage_png(["12-01", "12-02"], [(10, 20, 5), (0, 40, 8)]).startswith(b"\x89PNG")
    assert [r for r in caplog.records if r.name.split(".")[0] in ("matplotlib", "PIL")] == []


@pytest.mark.parametrize("name", ["httpx", "openai", "aiogram.event", "matplotlib.font_manager", "PIL.PngImagePlugin"])
def test_noisy_libraries_log_warnings_only(name: str) -> None:
    setup_logging("INFO")
    assert logging.getLogger(name).getEffectiveLevel() >= logging.WARNING
