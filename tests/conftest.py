"""Fixtures shared by the whole suite: the fake OpenAI-compatible server and a real engine + chat rig on
a temporary SQLite file. Helpers to build more of them live in ``tests/support.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes import FakeLLM
from tests.support import Rig, close_rig, make_settings, open_rig


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM() as llm:
        yield llm


@pytest.fixture
async def rig(fake_llm: FakeLLM, tmp_path: Path) -> AsyncIterator[Rig]:
    opened = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        yield opened
    finally:
        await close_rig(opened)
