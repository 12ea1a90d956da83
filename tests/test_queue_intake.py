"""Polling with workers never loses an update while Redis is down: the intake waits for the queue, tries
again with back-off, says so once, and queues the update when Redis is back (found by the adversarial run:
aiogram moved the offset past an update whose enqueue had failed)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from companion.ops.workers.workqueue import UpdateQueue, connect
from handlers import queue as intake_module
from handlers.queue import put_until_queued
from tests.servers import free_port

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (Debian's redis)")


@contextmanager
def redis_server(port: int, folder: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A Redis of this test's own, which it may stop and start (the shared one serves every other test)."""
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            server.poll()
            assert server.returncode is None, "redis-server did not start"
            time.sleep(0.05)
        yield server
    finally:
        server.kill()
        server.wait()


async def test_an_update_waits_while_redis_is_down_and_is_queued_once_it_is_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake_module, "QUEUE_RETRY_FIRST_S", 0.05)
    monkeypatch.setattr(intake_module, "QUEUE_RETRY_MAX_S", 0.2)
    caplog.set_level(logging.WARNING, logger="handlers.queue")
    port = free_port()
    client = connect(f"redis://127.0.0.1:{port}/0")
    queue = UpdateQueue(client, "intake")
    try:
        with redis_server(port, tmp_path):
            await put_until_queued(queue, 7, 1, b"first")  # Redis up: queued at once
        waiting = asyncio.create_task(put_until_queued(queue, 7, 2, b"second"))
        await asyncio.sleep(0.5)  # Redis down: the update waits, tried again and again
        assert not waiting.done()
        with redis_server(port, tmp_path):
            await asyncio.wait_for(waiting, 10)
            streams = [key async for key in client.scan_iter(match="intake:*")]
            payloads = []
            for key in streams:
                if await client.type(key) == b"stream":
                    payloads += [fields[b"u"] for _, fields in await client.xrange(key) or [] if fields]
            # The first went with the first server; the one that waited is here, once.
            assert payloads == [b"second"]
    finally:
        await client.aclose()
    warnings = [r.getMessage() for r in caplog.records]
    assert len([w for w in warnings if "polling waits" in w]) == 1, warnings
    assert any("the queue is back: update 2 is queued" in w for w in warnings), warnings
