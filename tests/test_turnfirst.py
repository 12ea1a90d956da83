"""The SQLite writer's lock: one holder, each queue in order, a turn's writes ahead of background work, and a
waiter cancelled at any moment never keeps the lock from the rest."""

from __future__ import annotations

import asyncio

from companion.storage.sqlite.turnfirst import TurnFirstLock


async def _take(lock: TurnFirstLock, name: str, order: list[str], *, first: bool = False, hold: float = 0.0) -> None:
    async with lock.first() if first else lock:
        order.append(name)
        await asyncio.sleep(hold)
        order.append(f"/{name}")


async def test_one_holder_and_the_turns_writes_go_before_background_work_queued_earlier() -> None:
    lock, order = TurnFirstLock(), list[str]()
    holder = asyncio.create_task(_take(lock, "consolidation", order, hold=0.05))
    await asyncio.sleep(0)
    waiting = [asyncio.create_task(_take(lock, name, order, first=name.startswith("turn")))
               for name in ("profile", "settings", "turn-1", "turn-2")]
    await asyncio.gather(holder, *waiting)
    assert order == ["consolidation", "/consolidation", "turn-1", "/turn-1", "turn-2", "/turn-2",
                     "profile", "/profile", "settings", "/settings"]
    assert not lock.locked()


async def test_a_free_lock_is_taken_at_once_whatever_the_queue() -> None:
    lock, order = TurnFirstLock(), list[str]()
    await _take(lock, "background", order)
    await _take(lock, "turn", order, first=True)
    assert order == ["background", "/background", "turn", "/turn"] and not lock.locked()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    lock, order = TurnFirstLock(), list[str]()
    holder = asyncio.create_task(_take(lock, "holder", order, hold=0.05))
    await asyncio.sleep(0)
    gone = asyncio.create_task(_take(lock, "gone", order, first=True))
    after = asyncio.create_task(_take(lock, "after", order))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.gather(holder, after, gone, return_exceptions=True)
    assert order == ["holder", "/holder", "after", "/after"] and not lock.locked()


async def test_a_waiter_cancelled_as_the_lock_reaches_it_passes_it_on() -> None:
    lock, order = TurnFirstLock(), list[str]()
    await lock.__aenter__()
    gone = asyncio.create_task(_take(lock, "gone", order, first=True))
    after = asyncio.create_task(_take(lock, "after", order))
    await asyncio.sleep(0)
    await lock.__aexit__(None, None, None)  # handed to "gone", which has not run since
    gone.cancel()
    await asyncio.gather(after, gone, return_exceptions=True)
    assert order == ["after", "/after"] and not lock.locked()


async def test_background_work_waits_for_a_few_turn_writes_only_however_many_keep_coming() -> None:
    """Under a steady load a turn write is always waiting; a consolidation that never got the lock would
    leave every turn unlearned (seen in make stress's 1,000-user load before this rule)."""
    lock, order = TurnFirstLock(first_in_a_row=3), list[str]()
    holder = asyncio.create_task(_take(lock, "holder", order, hold=0.02))
    await asyncio.sleep(0)
    background = asyncio.create_task(_take(lock, "consolidation", order))
    turns = [asyncio.create_task(_take(lock, f"turn-{n}", order, first=True)) for n in range(8)]
    await asyncio.gather(holder, background, *turns)
    granted = [name for name in order if not name.startswith("/")]
    assert granted.index("consolidation") == 4  # the holder, three turn writes, then the waiting background
    assert granted[1:4] == ["turn-0", "turn-1", "turn-2"] and not lock.locked()
