"""Turns the database cannot take for a while (a full disk) are not lost for learning: they wait in the
session and are queued, in order, with the first turn the database takes again (or at /stop_aiGF)."""

from __future__ import annotations

import asyncio
import sqlite3

from companion.core.models import Scope
from tests.fakes.llm import request_text
from tests.support import Rig

ALICE = Scope(1001)
async def schema(rig: Rig, sql: str) -> None:
    """A schema change beside the running store, in a thread: waiting for the write lock on the event loop's
    thread would keep a transaction the store has open (its next statement comes from the loop) from ending."""
    def change() -> None:
        with sqlite3.connect(rig.settings.db_path, timeout=30) as conn:
            conn.execute(sql)

    await asyncio.to_thread(change)


# A write that fails the way a full disk does (an OperationalError at run time, not a refusal of the values):
# the trigger parses text that is no JSON. (One naming a missing table fails when the statement is prepared,
# against the connection's cached schema, so a dropped trigger could still be seen by the next write.)
FULL = "CREATE TRIGGER full BEFORE INSERT ON pending_turns BEGIN SELECT json('the disk is full'); END"


async def test_turns_the_disk_could_not_take_are_queued_with_the_next_one(rig: Rig) -> None:
    await schema(rig, FULL)
    rig.llm.queue_chat("嗯", "好")
    assert (await rig.chat.reply(ALICE, "第一句")).ok
    assert (await rig.chat.reply(ALICE, "第二句")).ok  # the bot keeps answering
    assert await rig.engine.pending_turns(ALICE, 10) == []
    await schema(rig, "DROP TRIGGER full")
    rig.llm.queue_chat("好的")
    assert (await rig.chat.reply(ALICE, "第三句")).ok
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["第一句", "第二句", "第三句"]


async def test_waiting_turns_are_queued_at_stop_and_forgotten_with_everything(rig: Rig) -> None:
    await schema(rig, FULL)
    rig.llm.queue_chat("嗯", "好")
    await rig.chat.reply(ALICE, "我养了一只猫")
    await rig.chat.forget(ALICE, None)  # what waits to be queued is forgotten too
    await rig.chat.reply(ALICE, "今天好累")
    await schema(rig, "DROP TRIGGER full")
    rig.llm.clear()
    await rig.chat.stop(ALICE)  # queues what waited, then extracts it
    await rig.chat.drain()
    [prompt] = [text for text in map(request_text, rig.llm.json_requests()) if "今天好累" in text]
    assert "猫" not in prompt
