"""Two different facts stay two memories, through the bot (aiogram's real client against the fake Telegram
and the fake LLM): each save's receipt carries its own handle; a retelling in other words says what it
replaced ("改成了…，原来是…"), its undo button puts the old words back, and /why shows them. Extraction
keeps two facts apart too."""

from __future__ import annotations

import json

import pytest

from companion.chat import texts
from companion.core.errors import NothingToUndoError, NotYourMemoryError
from companion.core.models import Scope, Status, StatusReason, Turn
from tests.support import USER, Live, Rig


def judged(event: str, keywords: list[str], mtype: str = "event") -> str:
    return json.dumps({"event": event, "keywords": keywords, "type": mtype, "importance": 70, "core": False},
                      ensure_ascii=False)


def handles(live: Live, message: dict[str, object]) -> set[str]:
    return {data.rsplit(":", 2)[1] for _, data in live.tg.buttons(message)}


async def test_two_alike_saves_are_two_memories_with_their_own_handles(live: Live) -> None:
    scope = Scope(USER)
    await live.say("/start_aiGF", 1)
    # Keywords the model gives both: three of four shared, what merged them into one row.
    live.llm.set_json_reply(judged("每周二晚上要练吉他", ["周二", "晚上", "练吉他", "吉他"]))
    assert await live.say("记住：每周二晚上要练吉他", 2) == "记住了：每周二晚上要练吉他（中期记忆）"
    tuesday = live.tg.sent_messages(USER)[-1]
    live.llm.set_json_reply(judged("每周四晚上要练吉他", ["周四", "晚上", "练吉他", "吉他"]))
    assert await live.say("记住：每周四晚上要练吉他", 3) == "记住了：每周四晚上要练吉他（中期记忆）"
    thursday = live.tg.sent_messages(USER)[-1]
    by_event = {m.event: m.id for m in await live.rig.engine.memories(scope)}
    assert set(by_event) == {"每周二晚上要练吉他", "每周四晚上要练吉他"}
    assert handles(live, tuesday) == {str(by_event["每周二晚上要练吉他"])}
    assert handles(live, thursday) == {str(by_event["每周四晚上要练吉他"])}

    for i in (1, 2, 3):
        live.llm.set_json_reply(judged(f"第{i}个测试记忆：今天天气不错", ["测试", "记忆", "天气"]))
        assert (await live.say(f"记住：第{i}个测试记忆：今天天气不错", 3 + i)).startswith("记住了")
    tests = [m for m in await live.rig.engine.memories(scope) if "测试记忆" in m.event]
    assert len(tests) == 3

    # Forgetting Tuesday from its receipt leaves Thursday.
    await live.press(USER, tuesday, "忘掉", 1)
    assert [m.event for m in await live.rig.engine.memories(scope) if "吉他" in m.event] == ["每周四晚上要练吉他"]


async def test_a_retelling_says_what_it_replaced_and_undo_puts_it_back(live: Live) -> None:
    scope = Scope(USER)
    await live.say("/start_aiGF", 1)
    live.llm.set_json_reply(judged("我对花生过敏", ["花生", "过敏"], "fact"))
    await live.say("记住：我对花生过敏", 2)
    [first] = await live.rig.engine.memories(scope)
    live.llm.set_json_reply(judged("我花生过敏，吃了会起疹子", ["花生", "过敏", "起疹子"], "fact"))
    receipt_text = await live.say("记住：我花生过敏，吃了会起疹子", 3)
    assert receipt_text == "改成了：我花生过敏，吃了会起疹子，原来是：我对花生过敏（中期记忆）"
    receipt = live.tg.sent_messages(USER)[-1]
    assert [t for t, _ in live.tg.buttons(receipt)] == ["👌 好的", "↩️ 撤销", "✏️ 修改", "🗑 忘掉"]
    assert handles(live, receipt) == {str(first.id)}  # the same memory, retold
    why = await live.say("/why 花生", 4)
    assert why.startswith("“我花生过敏，吃了会起疹子”") and "原来是：“我对花生过敏”" in why

    await live.press(USER, receipt, "撤销", 1)
    undone = await live.tg.wait_for_edit(USER, int(receipt["message_id"]), "已撤销")
    assert undone["text"] == "已撤销，还是原来的：我对花生过敏（中期记忆）"
    assert "撤销" not in [t for t, _ in live.tg.buttons(undone)]
    [memory] = await live.rig.engine.memories(scope)
    assert (memory.id, memory.event) == (first.id, "我对花生过敏")
    assert "原来是" not in await live.say("/why 花生", 5)

    # The same button pressed again (a stale copy of the receipt): nothing left to undo, nothing changes.
    data = next(d for t, d in live.tg.buttons(receipt) if "撤销" in t)
    live.tg.push_callback(USER, int(receipt["message_id"]), data, chat_id=USER)
    answers = await live.tg.wait_for_callback_answers(2)
    assert answers[-1].get("text") == texts.NOTHING_TO_UNDO
    assert [m.event for m in await live.rig.engine.memories(scope)] == ["我对花生过敏"]


async def test_forgetting_a_reworded_memory_forgets_its_earlier_words(rig: Rig) -> None:
    engine, now, scope = rig.engine, rig.clock(), Scope(USER)
    rig.llm.set_json_reply(judged("我对花生过敏", ["花生", "过敏"], "fact"))
    await engine.save_said(scope, "我对花生过敏", now)
    rig.llm.set_json_reply(judged("我花生过敏", ["花生", "过敏"], "fact"))
    saved = await engine.save_said(scope, "我花生过敏", now)
    assert saved.replaced is not None and saved.replaced.event == "我对花生过敏"
    await engine.forget(scope, [saved.memory.id])
    left = await engine.memories(scope, set(Status) - {Status.FORGOTTEN})
    assert left == []


async def test_extraction_keeps_two_facts_apart_and_why_shows_a_rewording(rig: Rig) -> None:
    engine, now, scope = rig.engine, rig.clock(), Scope(USER)
    rig.llm.set_json_reply(judged("每周二晚上要练吉他", ["周二", "晚上", "练吉他", "吉他"]))
    await engine.save_said(scope, "每周二晚上要练吉他", now)
    rig.llm.set_json_reply(judged("我对花生过敏", ["花生", "过敏"], "fact"))
    peanut = (await engine.save_said(scope, "我对花生过敏", now)).memory
    rig.llm.set_json_reply(json.dumps({"memories": [
        {"event": "每周四晚上要练吉他", "keywords": ["周四", "晚上", "练吉他", "吉他"], "importance": 60},
        {"event": "对花生过敏，吃了会起疹子", "keywords": ["花生", "过敏"], "importance": 90, "type": "fact"},
    ]}, ensure_ascii=False))
    await engine.note_turn(scope, Turn("周四晚上也要练吉他；我对花生过敏，吃了会起疹子", "好的", now))
    result = await engine.consolidate(scope, now)
    assert (result.inserted, result.updated) == (1, 1)
    events = sorted(m.event for m in await engine.memories(scope))
    # Two memories for two facts (habits, so neither has a day).
    assert events == ["对花生过敏，吃了会起疹子", "每周二晚上要练吉他", "每周四晚上要练吉他"]
    story = await engine.why(scope, peanut.id)
    assert [(m.event, m.status_reason) for m in story.replaced] == [("我对花生过敏", StatusReason.REWORDED)]


async def test_an_older_receipts_undo_does_not_undo_a_later_change(rig: Rig) -> None:
    engine, now, scope = rig.engine, rig.clock(), Scope(USER)
    saved = []
    for words in ("我对花生过敏", "我花生过敏", "我对花生过敏，吃了会起疹子"):
        rig.llm.set_json_reply(judged(words, ["花生", "过敏"], "fact"))
        saved.append(await engine.save_said(scope, words, now))
    first, second = saved[1].replaced, saved[2].replaced
    assert first is not None and second is not None
    assert (first.event, second.event) == ("我对花生过敏", "我花生过敏")
    handle = saved[2].memory.id
    with pytest.raises(NothingToUndoError):
        await engine.undo_rewording(scope, handle, now, first.id)  # the first receipt: a later change came
    assert (await engine.undo_rewording(scope, handle, now, second.id)).event == "我花生过敏"
    assert (await engine.undo_rewording(scope, handle, now, first.id)).event == "我对花生过敏"
    assert [m.event for m in await engine.memories(scope, {Status.ACTIVE, Status.SUPERSEDED})] == ["我对花生过敏"]
    with pytest.raises(NotYourMemoryError):
        await engine.undo_rewording(Scope(USER + 1), handle, now)
