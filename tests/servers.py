"""Tests that need a server of the machine (PostgreSQL, Redis): whether it answers is asked once per test
session; without it such tests skip with one reason, and with ``CI=true`` they fail instead, so CI can never
pass without running them (``pgtest``, ``redistest``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Awaitable, Callable

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def ask(probe: Callable[[], Awaitable[str | None]]) -> str | None:
    """Why the server cannot be used, or None: ``probe`` runs on a thread with a loop of its own, so a test
    inside a running loop (an async fixture) can ask too."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, probe()).result()  # type: ignore[arg-type]


def require(why: str | None, server: str, skip_reason: str) -> None:
    """Skip (or in CI fail) the calling test when ``why`` says the server is unreachable."""
    if why is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true and the {server} test server is unreachable: {why}")
    pytest.skip(skip_reason)
