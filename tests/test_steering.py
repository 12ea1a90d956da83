"""Steering memory in conversation, through the real pipeline and the fake LLM: intents read from words,
receipts, forgetting that reaches the next reply call, reviews answered in words, /reset summaries."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from companion.chat import texts
from companion.chat.intents import Intent, Kind, read_intent, read_review_answer
from companion.core.errors import NothingToUndoError, NotYourMemoryError
from companion.core.models import MemoryDraft, Scope, Status, Tier, Validity
from companion.core.setting import REVIEW_SENT
from companion.core.tiers import Action
from companion.engine.curator import REVIEW_UNDO_WINDOW
from tests.support import Rig

ME = Scope(4242)


@pytest.mark.parametrize(("text", "intent"), [
    ("记住：每周一不要打扰我", Intent(Kind.SAVE, "每周一不要打扰我")),
    ("帮我记一下我对花生过敏", Intent(Kind.SAVE, "我对花生过敏")),
    ("remember this: I like green tea", Intent(Kind.SAVE, "I like green tea")),
    ("这个很重要", Intent(Kind.SAVE_PREVIOUS)),
    ("把这个写下来！", Intent(Kind.SAVE_PREVIOUS)),
    ("忘掉我的生日，以后别提了", Intent(Kind.FORGET, "生日")),
    ("忘记我对花生过敏的事吧", Intent(Kind.FORGET, "对花生过敏")),
    ("forget my birthday", Intent(Kind.FORGET, "my birthday")),
    ("全部忘掉", Intent(Kind.FORGET_ALL)),
    ("把我的事全部忘掉吧", Intent(Kind.FORGET_ALL)),
    ("忘掉所有记忆", Intent(Kind.FORGET_ALL)),
    ("请忘掉关于我的一切", Intent(Kind.FORGET_ALL)),
    ("forget everything", Intent(Kind.FORGET_ALL)),
    ("我全都忘了", None),  # the user forgetting, not a request
    ("你都忘了吗", None),
    ("我记住了你说的", None),
    ("我不想忘记你", None),
    ("今天很重要的考试考完了", None),
    ("记住", None),
])
def test_intents(text: str, intent: Intent | None) -> None:
    assert read_intent(text) == intent


SUGGESTED = [Action.PROMOTE, Action.ARCHIVE, Action.KEEP]


@pytest.mark.parametrize(("text", "answer"), [
    ("按你说的办", SUGGESTED),
    ("好的", SUGGESTED),
    ("第一个升级，第二个删除", [Action.PROMOTE, Action.FORGET, Action.KEEP]),
    ("第3个归档", [Action.PROMOTE, Action.ARCHIVE, Action.ARCHIVE]),
    ("第九个删除", SUGGESTED),  # out of range: nothing changes
    ("今天吃了火锅", None),
])
def test_review_answers(text: str, answer: list[Action] | None) -> None:
    assert read_review_answer(text, SUGGESTED) == answer


async def test_save_gives_a_receipt_and_uses_the_models_judgement(rig: Rig) -> None:
    rig.llm.set_json_reply(json.dumps({"event": "每周一不要打扰我", "keywords": ["周一", "打扰"],
                                       "type": "instruction", "importance": 80, "core": True}, ensure_ascii=False))
    await rig.chat.start(ME)
    reply = await rig.chat.reply(ME, "记住：每周一不要打扰我", chat_id=4242, message_id=77)
    assert reply.text == "记住了：每周一不要打扰我（长期记忆）"
    assert reply.saved is not None and reply.saved.tier is Tier.LONG
    assert (reply.saved.source_chat_id, reply.saved.source_message_id) == (4242, 77)
    assert rig.llm.chat_requests() == []  # a save is answered without a reply call
    # The instruction applies to every later reply.
    rig.llm.set_chat_reply("好的")
    await rig.chat.reply(ME, "今天好累")
    assert "每周一不要打扰我" in json.dumps(rig.llm.chat_requests()[-1], ensure_ascii=False)


async def test_save_previous_and_edit(rig: Rig) -> None:
    rig.llm.set_chat_reply("嗯嗯")
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我下周三要面试")
    rig.llm.fail_next(5)  # the model is down: the save still works, with the user's own words
    saved = await rig.chat.reply(ME, "这个很重要")
    assert saved.saved is not None and saved.saved.event == "我12月31日（周三）要面试"
    await rig.chat.begin_edit(ME, saved.saved.id)
    edited = await rig.chat.reply(ME, "我下周四要面试")
    assert edited.text.startswith("改好了：我1月1日（周四）要面试")  # the new words' own day, as its date
    [memory] = await rig.engine.memories(ME)
    assert memory.event == "我1月1日（周四）要面试" and memory.happens is not None


async def test_forget_reaches_the_next_reply_call(rig: Rig) -> None:
    rig.llm.set_chat_reply("记得啦")
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我的生日是三月五日")
    saved = await rig.chat.reply(ME, "记住：我的生日是三月五日")
    assert saved.saved is not None
    asked = await rig.chat.reply(ME, "忘掉我的生日，以后别提了")
    assert [m.id for m in asked.to_forget] == [saved.saved.id]
    assert await rig.chat.forget(ME, [m.id for m in asked.to_forget]) == 1
    await rig.chat.reply(ME, "你还记得什么")
    last = json.dumps(rig.llm.chat_requests()[-1], ensure_ascii=False)
    assert "三月五日" not in last
    assert (await rig.engine.get(ME, saved.saved.id)).status is Status.FORGOTTEN


async def test_unanswered_reviews_open_the_next_conversation(rig: Rig) -> None:
    rig.llm.set_chat_reply("在呢")
    await rig.chat.start(ME)
    saved = (await rig.chat.reply(ME, "记住：最近在学吉他")).saved
    assert saved is not None and saved.tier is not Tier.LONG
    await rig.chat.stop(ME)
    rig.clock.advance(days=40)
    await rig.engine.set_setting(REVIEW_SENT, ME, rig.clock() - timedelta(days=4))
    await rig.chat.start(ME)
    first = await rig.chat.reply(ME, "我回来啦")
    assert first.text.startswith("有1条记忆待处理，要看看吗？")
    done = await rig.chat.reply(ME, "按你说的办")
    assert "已归档" in done.text
    assert (await rig.engine.get(ME, saved.id)).status is Status.ARCHIVED


async def test_reset_keeps_a_summary_and_clears_context(rig: Rig) -> None:
    rig.llm.set_chat_reply("加油")
    rig.llm.set_json_reply(json.dumps({"summary": "最近在准备考研，压力有点大", "keywords": ["考研", "压力"]},
                                      ensure_ascii=False))
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我在准备考研")
    await rig.chat.reply(ME, "压力好大")
    text = await rig.chat.reset(ME)
    assert "最近在准备考研" in text
    summary = [m for m in await rig.engine.memories(ME) if "考研" in m.event]
    assert summary and summary[0].tier is Tier.SHORT
    await rig.chat.reply(ME, "你好")
    users = [m for m in rig.llm.chat_requests()[-1]["messages"] if m["role"] == "user"]
    assert len(users) == 1


@pytest.mark.parametrize(("raw", "shown"), [
    ("**好的**，我记得", "好的，我记得"),
    ("# 标题\n内容", "标题\n内容"),
    ("__强调__", "强调"),
    ("```\n代码\n```", "代码\n"),
    ("2*3=6，a_b", "2*3=6，a_b"),
])
def test_replies_are_plain_text(raw: str, shown: str) -> None:
    assert texts.plain(raw) == shown


async def test_a_review_answer_is_undone_by_the_engine_within_its_window(rig: Rig) -> None:
    now = rig.clock()
    [h] = await rig.engine.remember(ME, [MemoryDraft("在学吉他", ["吉他"], 60.0, validity=Validity.DAYS_7)], now)
    before = await rig.engine.get(ME, h)
    assert before.tier is Tier.SHORT and before.review_at is not None
    promoted = await rig.engine.review(ME, h, Action.PROMOTE, now)
    assert promoted.tier is Tier.MEDIUM
    with pytest.raises(NotYourMemoryError):
        await rig.engine.undo_review(Scope(1), h, Action.PROMOTE, now, done_at=now, tier=Tier.SHORT)
    back = await rig.engine.undo_review(ME, h, Action.PROMOTE, now + timedelta(seconds=30), done_at=now,
                                        tier=Tier.SHORT, review_at=before.review_at)
    assert back.tier is Tier.SHORT and back.review_at == before.review_at
    await rig.engine.review(ME, h, Action.ARCHIVE, now)
    late = now + REVIEW_UNDO_WINDOW + timedelta(seconds=1)
    with pytest.raises(NothingToUndoError):
        await rig.engine.undo_review(ME, h, Action.ARCHIVE, late, done_at=now)
    assert (await rig.engine.get(ME, h)).status is Status.ARCHIVED
    assert (await rig.engine.undo_review(ME, h, Action.ARCHIVE, now, done_at=now)).status is Status.ACTIVE
    with pytest.raises(NothingToUndoError):
        await rig.engine.undo_review(ME, h, Action.FORGET, now, done_at=now)
