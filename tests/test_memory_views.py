"""The ``/memories`` views shared by Telegram and the console (companion/chat/views.py), through aiogram's
real client and the fake Telegram server."""

from __future__ import annotations

from companion.chat import texts
from companion.core.models import MemoryDraft, Scope, Status, Validity
from tests.support import USER, Live


async def test_restoring_the_last_archived_memory_does_not_say_nothing_is_remembered(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    drafts = [MemoryDraft(f"第{i}件小事", [f"小事{i}"], 50.0 + i, validity=Validity.DAYS_30) for i in range(3)]
    await live.rig.engine.remember(scope, drafts, now)
    await live.say("/memories", 1)
    page = live.tg.sent_messages(USER)[-1]
    await live.press(USER, page, "1 归档", 1)
    archived = await live.tg.wait_for_edit(USER, int(page["message_id"]), "已归档")
    await live.press(USER, archived, "已归档", 2)
    view = await live.tg.wait_for_edit(USER, int(page["message_id"]), "已归档的记忆")
    await live.press(USER, view, "1 恢复", 3)
    restored = await live.tg.wait_for_edit(USER, int(page["message_id"]), "已恢复")
    # The archive is empty now: the main list, where the restored memory is back.
    assert texts.NO_MEMORIES not in str(restored["text"])
    assert all(f"第{i}件小事" in str(restored["text"]) for i in range(3))
    assert len(await live.rig.engine.memories(scope)) == 3
    assert await live.rig.engine.memories(scope, {Status.ARCHIVED}) == []
