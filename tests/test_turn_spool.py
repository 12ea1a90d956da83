"""Turns the database could not take wait on disk, not only in the process: a process that stops or dies
during an outage leaves them in its spool file, and the next process (or another worker) queues them.
Forgetting reaches the spooled copies. The database here is the real SQLite store, made to refuse the
queue's writes the way a full disk does (a trigger)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import MemoryDraft, Scope, Turn
from companion.core.timeutil import utcnow
from companion.engine.admin_port import AdminPort
from companion.ops.admin.admin_service import AdminService
from companion.storage.spool import Spools, TurnSpool
from tests.support import Rig

ALICE, BOB = Scope(1001), Scope(1002)
# A write that fails the way a full disk does (an OperationalError at run time, not a refusal of the values):
# the trigger parses text that is no JSON. (One naming a missing table fails when the statement is prepared,
# against the connection's cached schema, so a dropped trigger could still be seen by the next write.)
FULL = "CREATE TRIGGER full BEFORE INSERT ON pending_turns BEGIN SELECT json('the disk is full'); END"


def refuse(rig: Rig, refusing: bool) -> None:
    with sqlite3.connect(rig.settings.db_path) as conn:
        conn.execute(FULL if refusing else "DROP TRIGGER full")


@pytest.fixture
async def spools(rig: Rig) -> AsyncIterator[Spools]:
    made = Spools(rig.settings.spool_dir)
    yield made
    made.close()


def process(rig: Rig, spools: Spools) -> ChatService:
    """A chat service as a bot process has one, on the rig's engine, with a spool directory."""
    return ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock,
                       spools=spools)


def spooled(directory: Path) -> dict[str, list[str]]:
    """Every spooled turn on disk, by file, read as another process would."""
    found: dict[str, list[str]] = {}
    for path in sorted(directory.glob("turns-*.sqlite3")):
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT turn FROM spooled_turns ORDER BY scope_key, position")
            found[path.name] = [str(row[0]) for row in rows]
    return found


async def test_turns_spooled_by_a_process_that_died_are_queued_by_the_next(rig: Rig, spools: Spools) -> None:
    first = process(rig, spools)
    refuse(rig, True)
    rig.llm.queue_chat("嗯", "好")
    assert (await first.reply(ALICE, "第一句")).ok and (await first.reply(ALICE, "第二句")).ok
    [(name, turns)] = spooled(rig.settings.spool_dir).items()
    assert len(turns) == 2 and "第二句" in turns[1]
    refuse(rig, False)
    later = Spools(rig.settings.spool_dir)
    try:
        assert await process(rig, later).replay_spools() == 0, "a live process's file is its own"
        spools.close()  # the first process dies: the system drops its lock
        assert await process(rig, later).replay_spools() == 2
    finally:
        later.close()
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["第一句", "第二句"]
    assert spooled(rig.settings.spool_dir) == {} and not (rig.settings.spool_dir / name).exists()


async def test_a_replay_while_the_database_still_refuses_keeps_the_turns(rig: Rig, spools: Spools) -> None:
    dead = Spools(rig.settings.spool_dir)
    await dead.own().keep(ALICE, [Turn("我下周搬家", "好的", utcnow(), key="k1")])
    dead.close()
    refuse(rig, True)
    chat = process(rig, spools)
    assert await chat.replay_spools() == 0
    assert len(next(iter(spooled(rig.settings.spool_dir).values()))) == 1
    refuse(rig, False)
    assert await chat.replay_spools() == 1
    [turn] = await rig.engine.pending_turns(ALICE, 10)
    assert (turn.user, turn.reply, turn.key) == ("我下周搬家", "好的", "k1")


async def test_the_live_process_queues_its_own_spooled_turns_once_the_database_is_back(
    rig: Rig, spools: Spools,
) -> None:
    """A user who never writes again: the replay job tries the process's own waiting turns too."""
    chat = process(rig, spools)
    refuse(rig, True)
    rig.llm.queue_chat("嗯")
    await chat.reply(ALICE, "晚安")
    refuse(rig, False)
    await chat.replay_spools()
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["晚安"]
    assert all(not turns for turns in spooled(rig.settings.spool_dir).values())


async def test_forgetting_reaches_the_spooled_turns(rig: Rig, spools: Spools) -> None:
    chat = process(rig, spools)
    refuse(rig, True)
    rig.llm.queue_chat("嗯", "好", "哦")
    await chat.reply(ALICE, "我养了一只猫")
    await chat.reply(BOB, "我在学钢琴")
    await chat.forget(ALICE, None)  # everything of Alice's, the waiting turns and their spooled copies too
    [turns] = spooled(rig.settings.spool_dir).values()
    assert len(turns) == 1 and "钢琴" in turns[0] and "猫" not in "".join(turns)
    admin = AdminService(rig.engine, AdminPort(rig.store, None), rig.settings.tz, spools=spools)
    refuse(rig, False)
    await admin.forget_all(BOB.user_id)  # the operator's forget USER: in every spool file
    assert all(not turns for turns in spooled(rig.settings.spool_dir).values())


async def test_an_unwritable_spool_leaves_the_turns_waiting_in_the_process(rig: Rig, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("", encoding="utf-8")
    broken = Spools(blocked / "spool")
    try:
        chat = process(rig, broken)
        refuse(rig, True)
        rig.llm.queue_chat("嗯", "好")
        assert (await chat.reply(ALICE, "第一句")).ok, "the user is answered whatever the spool says"
        refuse(rig, False)
        assert (await chat.reply(ALICE, "第二句")).ok
        assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["第一句", "第二句"]
    finally:
        broken.close()


async def test_a_spooled_turn_survives_its_row_mapping(tmp_path: Path) -> None:
    spool = TurnSpool(tmp_path / "turns.sqlite3")
    at = utcnow()
    turns = [Turn("你好", None, at, chat_id=-100, message_id=7, key="a1"), Turn("引号\"和\n换行", "嗯", at)]
    await spool.keep(Scope(5, -100), turns)
    assert await spool.load(Scope(5, -100)) == turns
    assert await spool.scopes() == [Scope(5, -100)]
    await spool.keep(Scope(5, -100), [])
    assert await spool.scopes() == [] and await spool.load(Scope(5, -100)) == []


async def test_a_forget_reaches_the_scopes_turns_another_process_spooled(rig: Rig, spools: Spools) -> None:
    """The scope's turns waited in another worker's file (its shard moved here, or it died): forgetting one
    memory takes the turns that told it out of that file too, even with no session of the scope here."""
    other = Spools(rig.settings.spool_dir)
    try:
        at = utcnow()
        await other.own().keep(ALICE, [Turn("我养了一只猫叫咪咪", "好可爱", at, key="k1"),
                                       Turn("今天加班到很晚", "辛苦了", at, key="k2")])
        [cat] = await rig.engine.remember(ALICE, [MemoryDraft("养了一只猫叫咪咪", ["猫", "咪咪"], 70.0)], at)
        assert await process(rig, spools).forget(ALICE, [cat]) == 1
        assert [t.user for t in await other.own().load(ALICE)] == ["今天加班到很晚"]
        await process(rig, spools).forget(ALICE, None)
        assert await other.own().load(ALICE) == []
    finally:
        other.close()


# A turn whose values the database refuses (PostgreSQL refused NUL characters before they were replaced where
# text enters; any CHECK or character rule may): the trigger refuses the way a constraint does.
POISON = ("CREATE TRIGGER poison BEFORE INSERT ON pending_turns WHEN NEW.user_text LIKE '%坏%' "
          "BEGIN SELECT RAISE(ABORT, 'value refused'); END")


def poison(rig: Rig) -> None:
    with sqlite3.connect(rig.settings.db_path) as conn:
        conn.execute(POISON)


def set_aside(directory: Path) -> list[str]:
    return spooled(directory).get("turns-set-aside.sqlite3", [])


async def test_a_turn_the_database_refuses_is_set_aside_and_the_user_goes_on(
    rig: Rig, spools: Spools, caplog: pytest.LogCaptureFixture,
) -> None:
    chat = process(rig, spools)
    poison(rig)
    rig.llm.queue_chat("嗯", "好", "哦")
    assert (await chat.reply(ALICE, "先说一句")).ok
    assert (await chat.reply(ALICE, "这句是坏的")).ok
    assert (await chat.reply(ALICE, "再说一句")).ok
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["先说一句", "再说一句"]
    assert len(set_aside(rig.settings.spool_dir)) == 1 and "坏" in set_aside(rig.settings.spool_dir)[0]
    assert "1 turn(s) of" in caplog.text and "坏" not in caplog.text, "one line, and no text in the log"
    # Forgetting reaches the set-aside copy as any spooled one.
    await chat.forget(ALICE, None)
    assert set_aside(rig.settings.spool_dir) == []


async def test_a_replay_sets_aside_what_the_database_refuses_and_queues_the_rest(rig: Rig, spools: Spools) -> None:
    dead = Spools(rig.settings.spool_dir)
    at = utcnow()
    await dead.own().keep(ALICE, [Turn("第一句", "嗯", at), Turn("坏的一句", "嗯", at), Turn("第三句", "嗯", at)])
    await dead.own().keep(BOB, [Turn("鲍勃的话", "好", at)])
    dead.close()
    poison(rig)
    assert await process(rig, spools).replay_spools() == 3
    assert [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == ["第一句", "第三句"]
    assert [t.user for t in await rig.engine.pending_turns(BOB, 10)] == ["鲍勃的话"]
    assert list(spooled(rig.settings.spool_dir)) == ["turns-set-aside.sqlite3"], "the orphan is gone"
    assert "坏的一句" in set_aside(rig.settings.spool_dir)[0]
    assert await process(rig, spools).replay_spools() == 0, "a set-aside turn is never tried again"
