"""A group upgraded to a supergroup gets a new chat id; everything of the old id follows it: memories
per (group, user) with their handles, companion mode, queued and short-term turns, notes and the group's
settings. Telegram tells both chats, and a restart may come in between: moving twice changes nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import pytest

from companion.chat import group_texts as gt
from companion.core.errors import StorageError
from companion.core.models import Scope
from companion.core.setting import WEEKLY
from companion.core.timeutil import utcnow
from companion.storage.sqlite import chatmove
from handlers.groups import resume_moves
from tests.fakes.llm import request_text
from tests.groupkit import BOT, GroupBot, group_bot

A, B = 1001, 1002
OLD, NEW = -5001, -1000000005001


async def state(g: GroupBot) -> dict[str, Any]:
    """What a user of the group owns, under the new id and the old."""
    found: dict[str, Any] = {}
    for user in (A, B):
        for name, chat_id in (("new", NEW), ("old", OLD)):
            scope = Scope(user, chat_id)
            found[f"{user}-{name}"] = (sorted(m.event for m in await g.engine.memories(scope)),
                                      g.chat.is_active(scope), await g.engine.pending_count(scope),
                                      [t.user for t in await g.engine.recent_turns(scope, 10)],
                                      await g.engine.setting(WEEKLY, scope))
    found["chats"] = sorted({s.chat_id for s in await g.engine.active_scopes()}, key=str)
    return found


async def test_a_group_that_becomes_a_supergroup_keeps_everything(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        g.tg.add_group(OLD, "老群", kind="group", admins=(A,))
        for user in (A, B):
            await g.group(user, OLD, f"/start_aiGF@{BOT}")
        await g.seed(Scope(A, OLD), "喜欢火锅 甲一", ["火锅"])
        await g.seed(Scope(B, OLD), "喜欢火锅 乙一", ["火锅"])
        await g.private(A, "/start")
        await g.group(A, OLD, f"/forget@{BOT} 火锅")  # a confirmation sent privately before the move
        confirm = g.tg.sent_messages(A)[-1]
        await g.group(A, OLD, f"@{BOT} 今天降温了", first_name="老王")
        await g.engine.set_setting(WEEKLY, Scope(A, OLD), True)
        await g.group(A, OLD, f"/group_memory@{BOT} off")
        before = await state(g)
        assert before[f"{A}-old"] == (["喜欢火锅 甲一"], True, 1, ["今天降温了"], True)

        g.tg.push_migration(OLD, NEW)
        await g.deliver()
        after = await state(g)
        assert after[f"{A}-new"] == before[f"{A}-old"] and after[f"{B}-new"] == before[f"{B}-old"]
        assert after[f"{A}-old"] == ([], False, 0, [], None) and after[f"{B}-old"] == ([], False, 0, [], None)
        assert after["chats"] == [NEW]
        assert all(s.chat_id != OLD for s in await g.engine.active_scopes())

        await g.group(A, NEW, f"/group_memory@{BOT}")  # the group's setting moved too
        assert g.tg.sent_messages(NEW)[-1]["text"] == gt.GROUP_MEMORY_STATE.format(state=gt.on_off(False))
        await g.group(A, NEW, f"/group_memory@{BOT} on")
        g.llm.clear()
        await g.group(A, NEW, f"@{BOT} 想吃火锅", first_name="老王")
        request = request_text(g.llm.chat_requests()[-1])
        assert "甲一" in request and "今天降温了" in request and "乙一" not in request

        g.tg.push_migration(OLD, NEW)  # both notices again: nothing left to move, nothing lost
        await g.deliver()
        again = await state(g)
        assert again[f"{A}-new"][0] == ["喜欢火锅 甲一"] and again[f"{B}-new"] == after[f"{B}-new"]

        data = next(d for text, d in g.tg.buttons(confirm) if "忘掉第1条" in text)
        assert str(OLD) in data
        g.tg.push_callback(A, int(confirm["message_id"]), data, chat_id=A)  # the button names the old id
        await g.deliver()
        assert await g.engine.memories(Scope(A, NEW)) == []
        assert [m.event for m in await g.engine.memories(Scope(B, NEW))] == ["喜欢火锅 乙一"]

    async with group_bot(tmp_path) as g:  # a restart: the move was kept, and a late notice changes nothing
        g.tg.add_group(OLD, "老群", kind="group", admins=(A,))
        g.tg.push_migration(OLD, NEW)
        await g.deliver()
        restarted = await state(g)
        assert restarted[f"{B}-new"] == after[f"{B}-new"] and restarted[f"{A}-old"] == after[f"{A}-old"]
        assert restarted[f"{A}-new"][:2] == ([], True)


MEMBERS = tuple(range(2001, 2007))


@pytest.mark.parametrize("cut_after", [0, 1, 4])
async def test_a_move_cut_short_is_finished_at_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        cut_after: int) -> None:
    """The move fails after ``cut_after`` members (an injected failure standing for ``kill -9``; Telegram
    sends no second notice); the next start finds the marker and finishes it: every member under the new
    id, with memories, companion mode and the group's setting, nothing left under the old id."""
    async with group_bot(tmp_path) as g:
        g.tg.add_group(OLD, "老群", kind="group", admins=(MEMBERS[0],))
        for user in MEMBERS:
            await g.group(user, OLD, f"/start_aiGF@{BOT}")
            await g.seed(Scope(user, OLD), f"喜欢火锅 {user}", ["火锅"])
        await g.group(MEMBERS[0], OLD, f"/group_memory@{BOT} off")
        real, done = chatmove.move_scope, list[Scope]()

        async def crashing(conn: aiosqlite.Connection, old: Scope, new: Scope, old_table: str, new_table: str) -> None:
            if len(done) == cut_after:
                raise sqlite3.OperationalError("injected: the process died here")
            await real(conn, old, new, old_table, new_table)
            done.append(old)

        monkeypatch.setattr(chatmove, "move_scope", crashing)
        await g.engine.begin_move(OLD, NEW, utcnow())  # as on_migration does before anything moves
        with pytest.raises(StorageError):
            await g.engine.move_chat(OLD, NEW, utcnow())
        monkeypatch.setattr(chatmove, "move_scope", real)
        stranded = [u for u in MEMBERS if await g.engine.memories(Scope(u, OLD))]
        assert len(stranded) == len(MEMBERS) - cut_after

    async with group_bot(tmp_path) as g:  # the restart
        assert await resume_moves(g.engine, g.chat, g.dispatcher["groups"]) == 1
        for user in MEMBERS:
            assert [m.event for m in await g.engine.memories(Scope(user, NEW))] == [f"喜欢火锅 {user}"]
            assert await g.engine.memories(Scope(user, OLD)) == []
            assert g.chat.is_active(Scope(user, NEW)) and not g.chat.is_active(Scope(user, OLD))
        assert not await g.dispatcher["groups"].memory_on(NEW)
        assert await g.dispatcher["groups"].current_id(OLD) == NEW
        assert await resume_moves(g.engine, g.chat, g.dispatcher["groups"]) == 0  # the marker is gone


async def test_the_notice_handler_leaves_the_marker_for_the_next_start(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the dispatcher: the old chat's notice only (Telegram sends it once), the move failing after
    two members; the handler wrote the marker first, so the next start finishes it."""
    async with group_bot(tmp_path) as g:
        g.tg.add_group(OLD, "老群", kind="group", admins=(MEMBERS[0],))
        for user in MEMBERS:
            await g.group(user, OLD, f"/start_aiGF@{BOT}")
            await g.seed(Scope(user, OLD), f"喜欢火锅 {user}", ["火锅"])
        real, done = chatmove.move_scope, list[Scope]()

        async def crashing(conn: aiosqlite.Connection, old: Scope, new: Scope, old_table: str, new_table: str) -> None:
            if len(done) == 2:
                raise sqlite3.OperationalError("injected: the process died here")
            await real(conn, old, new, old_table, new_table)
            done.append(old)

        monkeypatch.setattr(chatmove, "move_scope", crashing)
        g.tg.add_group(NEW, "老群")
        g.tg.push_update({"message": {"message_id": 99, "date": 0, "migrate_to_chat_id": NEW,
                                      "chat": {"id": OLD, "type": "group", "title": "老群"},
                                      "from": {"id": MEMBERS[0], "is_bot": False, "first_name": "管理员"}}})
        await g.deliver()
        monkeypatch.setattr(chatmove, "move_scope", real)
        assert len([u for u in MEMBERS if await g.engine.memories(Scope(u, OLD))]) == len(MEMBERS) - 2

    async with group_bot(tmp_path) as g:
        assert await resume_moves(g.engine, g.chat, g.dispatcher["groups"]) == 1
        for user in MEMBERS:
            assert [m.event for m in await g.engine.memories(Scope(user, NEW))] == [f"喜欢火锅 {user}"]
            assert await g.engine.memories(Scope(user, OLD)) == []
