"""Memory commands and buttons through aiogram's real client and the fake Telegram server: receipts,
/memories pages, /forget with confirmation, /why, /stats, /reset, /start, reviews with undo, and another
user's button changing nothing."""

from __future__ import annotations

import json
from datetime import timedelta

from companion.chat import texts
from companion.core.models import MemoryDraft, Scope, Status, Tier, Validity
from handlers.reviews import send_review
from tests.support import USER, Live

OTHER = 5151


def judged(event: str, mtype: str = "fact", core: bool = False) -> str:
    return json.dumps({"event": event, "keywords": [event[:2]], "type": mtype, "importance": 70, "core": core},
                      ensure_ascii=False)


async def test_receipt_buttons_fine_edit_forget(live: Live) -> None:
    await live.say("/start_aiGF", 1)
    live.llm.set_json_reply(judged("每周一不要打扰我", "instruction", core=True))
    assert await live.say("记住：每周一不要打扰我", 2) == "记住了：每周一不要打扰我（长期记忆）"
    receipt = live.tg.sent_messages(USER)[-1]
    assert [t for t, _ in live.tg.buttons(receipt)] == ["👌 好的", "✏️ 修改", "🗑 忘掉"]

    await live.press(USER, receipt, "修改", 1)
    await live.tg.wait_for_messages(USER, 3)
    live.llm.set_json_reply(judged("x"))
    assert await live.say("每周一和周二都不要打扰我", 4) == "改好了：每周一和周二都不要打扰我（长期记忆）"
    [memory] = await live.rig.engine.memories(Scope(USER))
    assert memory.event == "每周一和周二都不要打扰我"

    edited_receipt = live.tg.sent_messages(USER)[-1]
    await live.press(USER, edited_receipt, "忘掉", 2)
    forgotten = await live.tg.wait_for_edit(USER, int(edited_receipt["message_id"]), "忘掉了")
    assert forgotten["text"] == texts.forgotten(1) and not live.tg.buttons(forgotten)  # the receipt, not a list
    assert await live.rig.engine.memories(Scope(USER)) == []


async def test_memories_pages_and_buttons(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    drafts = [MemoryDraft(f"第{i}件小事", [f"小事{i}"], 50.0 + i, validity=Validity.DAYS_30) for i in range(7)]
    await live.rig.engine.remember(scope, drafts, now)
    text = await live.say("/memories", 1)
    assert text.startswith("我记得的关于你的事：") and "【中期记忆】" in text and "（第 1/2 页）" in text
    page = live.tg.sent_messages(USER)[-1]
    labels = [t for t, _ in live.tg.buttons(page)]
    assert "1 忘掉" in labels and "1 升级" in labels and "下一页 ➡️" in labels

    await live.press(USER, page, "下一页", 1)
    second = await live.tg.wait_for_edit(USER, int(page["message_id"]), "（第 2/2 页）")
    await live.press(USER, second, "1 升级", 2)
    promoted = await live.tg.wait_for_edit(USER, int(page["message_id"]), "升级为长期记忆")
    assert [m.tier for m in await live.rig.engine.memories(scope)].count(Tier.LONG) == 1

    await live.press(USER, promoted, "1 归档", 3)
    await live.tg.wait_for_edit(USER, int(page["message_id"]), "已归档")
    archived = await live.rig.engine.memories(scope, {Status.ARCHIVED})
    assert len(archived) == 1
    listing = await live.say("/memories", 2)
    assert archived[0].event not in listing


async def test_forget_command_confirms_and_forget_all(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    await live.rig.engine.remember(scope, [MemoryDraft("生日是三月五日", ["生日"], 80.0),
                                           MemoryDraft("喜欢奶茶", ["奶茶"], 60.0)], now)
    text = await live.say("/forget 生日", 1)
    assert text.startswith("找到这些记忆") and "生日是三月五日" in text
    await live.press(USER, live.tg.sent_messages(USER)[-1], "忘掉第1条", 1)
    assert [m.event for m in await live.rig.engine.memories(scope)] == ["喜欢奶茶"]

    assert await live.say("/forget all", 2) == texts.confirm_forget_all(1)
    await live.press(USER, live.tg.sent_messages(USER)[-1], "确定", 2)
    assert await live.rig.engine.memories(scope) == []


async def test_another_users_button_changes_nothing(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    await live.rig.engine.remember(scope, [MemoryDraft("只属于我的事", ["秘密"], 70.0)], now)
    await live.say("/memories", 1)
    page = live.tg.sent_messages(USER)[-1]
    data = next(d for t, d in live.tg.buttons(page) if "忘掉" in t)
    # The other user presses a button carrying the first user's handle (forged into their own chat).
    live.tg._sent.append({**page, "chat_id": OTHER, "message_id": 999})
    live.tg.push_callback(OTHER, 999, data, chat_id=OTHER)
    [answer] = await live.tg.wait_for_callback_answers(1)
    assert answer.get("text") == texts.NOT_YOURS
    assert [m.event for m in await live.rig.engine.memories(scope)] == ["只属于我的事"]


async def test_why_stats_reset_and_start(live: Live) -> None:
    assert await live.say("/start", 1) == texts.START_GREETING
    await live.press(USER, live.tg.sent_messages(USER)[-1], "开启陪伴模式", 1)
    await live.tg.wait_for_messages(USER, 2)
    assert live.rig.chat.is_active(Scope(USER))
    live.llm.set_json_reply(judged("我对花生过敏", core=True))
    await live.say("记住：我对花生过敏", 3)
    why = await live.say("/why 花生", 4)
    assert why.startswith("“我对花生过敏”") and "你让我记住" in why
    stats = await live.say("/stats", 5)
    assert "我记得关于你的 1 件事" in stats
    assert (await live.say("/reset", 6)).startswith("好，我们重新开始聊吧")


async def test_review_buttons_with_undo(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    [h] = await live.rig.engine.remember(scope, [MemoryDraft("在学吉他", ["吉他"], 60.0, validity=Validity.DAYS_7)],
                                         now)
    due = await live.rig.engine.due_reviews(scope, now + timedelta(days=7))
    async with live.bot() as bot:
        await send_review(bot, USER, due)
    review = (await live.tg.wait_for_messages(USER, 1))[-1]
    assert "在学吉他" in str(review["text"]) and "建议归档" in str(review["text"])
    await live.press(USER, review, "1 升级", 1)
    done = await live.tg.wait_for_edit(USER, int(review["message_id"]), "升级为中期记忆")
    assert (await live.rig.engine.get(scope, h)).tier is Tier.MEDIUM
    await live.press(USER, done, "撤销", 2)
    await live.tg.wait_for_edit(USER, int(review["message_id"]), "已撤销")
    assert (await live.rig.engine.get(scope, h)).tier is Tier.SHORT


async def test_restoring_the_last_archived_memory_shows_the_list_it_is_back_in(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    await live.rig.engine.remember(scope, [MemoryDraft("喜欢奶茶", ["奶茶"], 60.0),
                                           MemoryDraft("住在杭州", ["杭州"], 60.0)], now)
    kept = await live.rig.engine.memories(scope)
    await live.rig.engine.archive(scope, next(m.id for m in kept if m.event == "住在杭州"), now)
    await live.say("/memories", 1)
    page = live.tg.sent_messages(USER)[-1]
    await live.press(USER, page, "已归档", 1)
    archive = await live.tg.wait_for_edit(USER, int(page["message_id"]), "已归档的记忆")
    assert "↩️ 返回" in [t for t, _ in live.tg.buttons(archive)]
    await live.press(USER, archive, "1 恢复", 2)
    after = await live.tg.wait_for_edit(USER, int(page["message_id"]), "已恢复：住在杭州")
    assert texts.NO_MEMORIES not in after["text"]
    assert "喜欢奶茶" in after["text"] and "住在杭州" in after["text"].split("\n\n", 1)[1]


async def test_the_archive_view_has_a_way_back_even_when_empty(live: Live) -> None:
    await live.rig.engine.remember(Scope(USER), [MemoryDraft("喜欢奶茶", ["奶茶"], 60.0)], live.rig.clock())
    await live.say("/memories", 1)
    page = live.tg.sent_messages(USER)[-1]
    await live.press(USER, page, "已归档", 1)
    empty = await live.tg.wait_for_edit(USER, int(page["message_id"]), texts.NO_ARCHIVED)
    assert texts.NO_MEMORIES not in empty["text"]
    await live.press(USER, empty, "返回", 2)
    back = await live.tg.wait_for_edit(USER, int(page["message_id"]), "我记得的关于你的事")
    assert "喜欢奶茶" in back["text"] and "🗂 已归档" in [t for t, _ in live.tg.buttons(back)]


async def test_a_forget_choice_removes_the_buttons(live: Live) -> None:
    scope, now = Scope(USER), live.rig.clock()
    await live.rig.engine.remember(scope, [MemoryDraft("生日是三月五日", ["生日"], 80.0)], now)
    await live.say("/forget 生日", 1)
    choices = live.tg.sent_messages(USER)[-1]
    await live.press(USER, choices, "忘掉第1条", 1)
    done = await live.tg.wait_for_edit(USER, int(choices["message_id"]), texts.forgotten(1))
    assert live.tg.buttons(done) == []
