"""Tests that need a server of the machine (PostgreSQL, Redis): whether it answers is asked once per test
session; without it such tests skip with one reason, and with ``CI=true`` they fail instead, so CI can never
pass without running them (``pgtest``, ``redistest``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
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


def free_port() -> int:
    """A port nothing on 127.0.0.1 listens on right now (for a webhook or a server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
