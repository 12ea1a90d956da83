"""The PostgreSQL store survives its connections being ended under it (``pg_terminate_backend``, what a
server restart does to every backend): store calls in progress complete on fresh connections, each
change is applied exactly once (none lost, none doubled by running again after a lost COMMIT), and
nothing lands in another scope."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from companion.core.models import MemoryDraft, Scope, ShortKind, Turn
from companion.core.timeutil import utcnow
from companion.storage.factory import open_store
from companion.storage.postgres.reconnect import ConnectionLostError
from tests.pgtest import ending_backends, named, pg_schema

pytestmark = pytest.mark.postgresql

WRITERS = 8
CHANGES = 25


def draft(writer: int, n: int) -> MemoryDraft:
    return MemoryDraft(event=f"写信的人{writer}第{n}件事", keywords=[f"w{writer}", f"n{n}"], importance=50)


async def test_store_calls_complete_once_while_backends_are_ended() -> None:
    app = f"reconnect_{uuid.uuid4().hex[:8]}"
    async with pg_schema() as url:
        store = await open_store(named(url, app))
        try:
            async def writer(w: int) -> None:
                scope = Scope(800_000 + w)
                for n in range(CHANGES):
                    now = utcnow()
                    # A memory transaction (journal, advisory lock), a turn's queue entry, a short-term item and
                    # reads between them: what one turn and its extraction do.
                    await store.apply_changes(scope, now, inserts=[draft(w, n)], sources=[f"t{w}-{n}"])
                    await store.add_turn(scope, Turn(user=f"第{n}句", reply="嗯", at=now))
                    await store.add_short(scope, ShortKind.TURN, f"第{n}句", "嗯", now, keep=100)
                    assert len(await store.fetch_memories(scope)) == n + 1

            async with ending_backends(app, every=(0.1, 0.4)) as ended:
                await asyncio.gather(*(writer(w) for w in range(WRITERS)))
            assert ended[0] > 0, "no backend was ended: the test proved nothing"

            for w in range(WRITERS):
                scope = Scope(800_000 + w)
                events = sorted(m.event for m in await store.fetch_memories(scope))
                assert events == sorted(draft(w, n).event for n in range(CHANGES)), f"writer {w}: {events}"
                assert await store.count_pending(scope) == CHANGES
                assert len(await store.short_items(scope, ShortKind.TURN, 1000)) == CHANGES
        finally:
            await store.close()


async def test_a_server_that_stays_away_fails_with_the_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the retry time a store call fails as ``StorageError`` (``ConnectionLostError``), so the turn
    answers the error notice instead of waiting forever; a call that gets through in time returns."""
    from companion.storage.postgres import reconnect

    monkeypatch.setattr(reconnect, "RECONNECT_SECONDS", 0.3)
    calls = 0

    async def never() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionLostError("connection lost: OSError")

    async def third_time() -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionLostError("connection lost: OSError")
        return calls

    with pytest.raises(ConnectionLostError):
        await reconnect.reconnecting(never)
    assert calls > 1, "never tried again"
    calls = 0
    assert await reconnect.reconnecting(third_time) == 3
