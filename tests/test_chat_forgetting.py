"""The chat layer's copies of what was said follow every forget (``companion.chat.followers``), whichever
door it came through, with no word from it: a session drops the turns that told the forgotten memory (its
history and the turns waiting to be queued), the spool files drop their copies; a forget of another
process, known by handle only, takes what the session cannot prove clean. The real pipeline on a real
SQLite file; "another process" is a second engine on the same file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core import tiers
from companion.core.models import MemoryDraft, MemoryType, Scope, Validity
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from companion.storage.spool import Spools
from tests.support import Rig

ALICE = Scope(1001)
DOG = "我家小狗叫豆豆"
FULL = "CREATE TRIGGER full BEFORE INSERT ON pending_turns BEGIN SELECT json('the disk is full'); END"


async def disk_full(rig: Rig, full: bool) -> None:
    """Queue writes fail as on a full disk (a trigger), beside the running store, in a thread."""
    def change() -> None:
        with sqlite3.connect(rig.settings.db_path, timeout=30) as conn:
            conn.execute(FULL if full else "DROP TRIGGER full")

    await asyncio.to_thread(change)


def dog() -> MemoryDraft:
    return MemoryDraft(DOG, ["小狗", "豆豆"], 80, Validity.PERMANENT, MemoryType.FACT)


def history(chat: ChatService) -> list[str]:
    return [t.user for t in chat.session(ALICE).history]


def waiting(chat: ChatService) -> list[str]:
    return [t.user for t in chat.session(ALICE).unqueued]


@pytest.fixture
async def spools(rig: Rig) -> AsyncIterator[Spools]:
    made = Spools(rig.settings.spool_dir)
    yield made
    made.close()


def spooled(directory: Path) -> list[str]:
    """Every spooled turn on disk, read as another process would."""
    found: list[str] = []
    for path in sorted(directory.glob("turns-*.sqlite3")):
        with sqlite3.connect(path) as conn:
            found += [str(row[0]) for row in conn.execute("SELECT turn FROM spooled_turns")]
    return found


async def test_a_review_forget_leaves_the_session_though_nobody_names_it(rig: Rig) -> None:
    """A review's forget (``MemoryEngine.review``, as the review buttons call it) never names the chat:
    its session and its waiting turns follow the feed."""
    [handle] = await rig.engine.remember(ALICE, [dog()], rig.clock())
    await disk_full(rig, True)
    rig.llm.queue_chat("好可爱", "嗯嗯")
    assert (await rig.chat.reply(ALICE, DOG)).ok and (await rig.chat.reply(ALICE, "今天好累")).ok
    assert history(rig.chat) == [DOG, "今天好累"] and waiting(rig.chat) == [DOG, "今天好累"]
    await rig.engine.review(ALICE, handle, tiers.Action.FORGET, rig.clock())
    assert history(rig.chat) == ["今天好累"] and waiting(rig.chat) == ["今天好累"]
    await disk_full(rig, False)
    rig.llm.queue_chat("早点睡")
    assert (await rig.chat.reply(ALICE, "晚安")).ok
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["今天好累", "晚安"]
    assert DOG not in str(rig.llm.chat_requests()[-1]["messages"])


async def test_another_process_forget_takes_what_the_session_cannot_prove_clean(rig: Rig) -> None:
    [handle] = await rig.engine.remember(ALICE, [dog()], rig.clock())
    rig.llm.queue_chat("好可爱")
    assert (await rig.chat.reply(ALICE, "今天天气不错")).ok
    await disk_full(rig, True)
    rig.llm.queue_chat("嗯嗯")
    assert (await rig.chat.reply(ALICE, "它今天又拆家了")).ok  # tells the dog in words no check can see
    assert waiting(rig.chat) == ["它今天又拆家了"]
    other = await open_engine(rig.settings, KeywordExtractor())
    try:
        await other.forget(ALICE, [handle])
    finally:
        await other.close()
    await disk_full(rig, False)
    rig.llm.queue_chat("好的")
    assert (await rig.chat.reply(ALICE, "晚安")).ok
    # Known here by its handle only: the waiting turn, which no store holds, went; the history was read
    # again from the store, which that forget scrubbed by the turns' keys.
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["今天天气不错", "晚安"]


async def test_the_engines_forget_reaches_the_spool_files(rig: Rig, spools: Spools) -> None:
    chat = ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock,
                       spools=spools)
    await disk_full(rig, True)
    rig.llm.queue_chat("好可爱", "嗯嗯")
    await chat.reply(ALICE, "我养了一只猫")
    await chat.reply(ALICE, "今天好累")
    assert len(spooled(rig.settings.spool_dir)) == 2
    await rig.engine.forget(ALICE, None)  # not the chat's forget: the operator's, a tool's, another host's
    assert spooled(rig.settings.spool_dir) == []
    assert waiting(chat) == [] and history(chat) == []


IN_GROUP = Scope(1001, -100777)


async def test_a_forget_through_any_door_leaves_the_groups_room(rig: Rig) -> None:
    """The room (other members' recent lines, never stored) follows the forget too: the lines about the member
    that tell the forgotten memory go, other lines stay; everything forgotten takes every line about them."""
    [handle] = await rig.engine.remember(IN_GROUP, [dog()], rig.clock())
    room = rig.chat.rooms.room(IN_GROUP.chat_id or 0)
    room.add("小明", "我家小狗叫豆豆，超可爱", about=ALICE.user_id)
    room.add("小明", "今天好冷", about=ALICE.user_id)
    room.add("小红", "豆豆是谁呀", about=2002)
    await rig.engine.forget(IN_GROUP, [handle])  # the engine's door: no handler names the room
    assert [text for _, text, _ in room.lines] == ["今天好冷", "豆豆是谁呀"]
    await rig.engine.forget(IN_GROUP)
    assert [text for _, text, _ in room.lines] == ["豆豆是谁呀"]
