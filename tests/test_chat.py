"""The conversation pipeline with a real engine, real SQLite and the real openai SDK against FakeLLM."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from pathlib import Path

import pytest

from companion.chat import texts
from companion.core.models import MemoryDraft, MemoryType, Scope, Turn, Validity
from tests.fakes import FakeLLM
from tests.scripted import COLD, ScriptedBrain, is_extraction, model_context, user_words
from tests.support import Rig, close_rig, make_settings, open_rig

ME = Scope(777)


async def seed(rig: Rig, *drafts: MemoryDraft) -> list[int]:
    return await rig.engine.remember(ME, list(drafts), rig.clock())


def cold(importance: float = 85) -> MemoryDraft:
    return MemoryDraft("2025-12-22 感冒发烧，身体不舒服", ["感冒", "发烧", "不舒服"], importance, Validity.DAYS_30)


async def test_recall_only_when_the_topic_touches_it(rig: Rig) -> None:
    await seed(rig, cold())
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "今天天气真好，想去公园")
    assert "感冒发烧" not in model_context(rig.llm.chat_requests()[-1])
    reply = await rig.chat.reply(ME, "我今天又有点不舒服")
    prompt = model_context(rig.llm.chat_requests()[-1])
    assert "感冒发烧" in prompt and "最多自然地提起其中一条" in prompt
    assert reply.recalled and reply.ok


async def test_cooldown_holds_for_five_turns(rig: Rig) -> None:
    await seed(rig, cold())
    await rig.chat.start(ME)
    carried = []
    for _ in range(12):
        await rig.chat.reply(ME, "还是不舒服")
        carried.append("感冒发烧" in model_context(rig.llm.chat_requests()[-1]))
    turns = [i + 1 for i, on in enumerate(carried) if on]
    assert turns[0] == 1
    assert all(b - a >= 5 for a, b in itertools.pairwise(turns)), turns


async def test_memories_come_up_in_at_most_about_a_fifth_of_turns(rig: Rig) -> None:
    await seed(rig, *[
        MemoryDraft(f"2025-12-{10 + i} 不舒服的第{i}件事 话题{i}", ["不舒服", f"话题{i}"], 70, Validity.DAYS_30)
        for i in range(12)
    ])
    await rig.chat.start(ME)
    carried = 0
    for _ in range(50):
        reply = await rig.chat.reply(ME, "我有点不舒服")
        carried += bool(reply.recalled)
    assert 5 <= carried <= 11, carried


async def test_at_most_two_memories_and_importance_floor(rig: Rig) -> None:
    await seed(
        rig, cold(90),
        MemoryDraft("2025-12-20 发烧去了医院", ["发烧", "医院"], 80, Validity.DAYS_30),
        MemoryDraft("2025-12-21 发烧吃了退烧药", ["发烧", "退烧药"], 75, Validity.DAYS_30),
        MemoryDraft("2025-12-21 小时候常发烧", ["发烧", "小时候"], 40, Validity.DAYS_30),
    )
    result = await rig.engine.recall(ME, "发烧了怎么办", rig.clock())
    assert len(result) == 2
    assert all(r.memory.importance >= 50 for r in result)


async def test_reply_failure_is_friendly_and_loses_nothing(rig: Rig) -> None:
    await rig.chat.start(ME)
    rig.llm.fail_next(1, status=500)
    reply = await rig.chat.reply(ME, "我想跟你说件重要的事")
    assert not reply.ok and reply.text == texts.LLM_DOWN
    assert await rig.engine.pending_count(ME) == 1
    ok = await rig.chat.reply(ME, "你还在吗")
    assert ok.ok
    last_user = rig.llm.chat_requests()[-1]["messages"][-1]["content"]
    assert "我想跟你说件重要的事" in last_user and "你还在吗" in last_user


@pytest.mark.parametrize("failure", ["timeout", "blank", "html"])
async def test_other_reply_failures(rig: Rig, failure: str) -> None:
    await rig.chat.start(ME)
    if failure == "timeout":
        rig.llm.delay_next(6)
    elif failure == "blank":
        rig.llm.blank_next()
    else:
        rig.llm.raw_next("<html>502</html>")
    reply = await rig.chat.reply(ME, "在吗")
    assert not reply.ok and reply.text == texts.LLM_DOWN


async def test_short_term_context_keeps_ten_turns_and_drops_old_ones_in_steps(rig: Rig) -> None:
    await rig.chat.start(ME)
    for i in range(22):
        await rig.chat.reply(ME, f"第{i}句")
    calls = [[user_words(m["content"]) for m in r["messages"] if m["role"] == "user"] for r in rig.llm.chat_requests()]
    # Up to 19 past turns, then back to 10: the prompt prefix changes once in ten turns, not every turn.
    assert [len(users) - 1 for users in calls] == [*range(20), 10, 11]
    assert calls[-1][0] == "第10句" and calls[-1][-1] == "第21句"


async def test_talk_from_half_a_day_ago_is_no_longer_sent_as_the_conversation(rig: Rig) -> None:
    """Yesterday's chat is not what was just said: after HISTORY_MAX_AGE it leaves the reply call (and the
    recall query), while this morning's turns stay."""
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "昨晚去看了一场演唱会")
    rig.clock.advance(hours=13)
    await rig.chat.reply(ME, "早上好")
    rig.clock.advance(minutes=5)
    await rig.chat.reply(ME, "今天有点困")
    calls = [[user_words(m["content"]) for m in r["messages"] if m["role"] == "user"] for r in rig.llm.chat_requests()]
    assert calls[-2] == ["早上好"]
    assert calls[-1] == ["早上好", "今天有点困"]


async def test_important_news_extracts_at_once_and_never_sees_injected_memory(rig: Rig) -> None:
    brain = ScriptedBrain(facts={"离职": {
        "event": "2025-12-23 下个月离职", "keywords": ["离职", "工作"], "importance": 80, "validity": "30d",
        "type": "event"}})
    brain.install(rig.llm)
    await seed(rig, MemoryDraft("2025-11-01 喜欢的工作是设计", ["工作", "设计"], 60, Validity.PERMANENT))
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我决定下个月离职了，工作太累")
    await rig.chat.drain()
    extraction = [r for r in rig.llm.json_requests() if is_extraction(r)]
    assert len(extraction) == 1
    prompt = extraction[0]["messages"][-1]["content"]
    assert "我决定下个月离职了" in prompt
    # Stored memories are shown only as marked reference (to spot contradictions), never as dialogue.
    dialogue = prompt.rsplit("对话：", 1)[1]
    assert "喜欢的工作是设计" not in dialogue, "extraction must not re-read injected memories as dialogue"
    [quit_job] = [m for m in await rig.engine.memories(ME) if m.event.endswith("离职")]
    # "下个月" names next month as the words were told; stored as that month, never as the stale word.
    assert "下个月" not in quit_job.event and quit_job.happens is not None and quit_job.happens.ends is not None
    assert await rig.engine.pending_count(ME) == 0


async def test_extraction_every_8_to_12_turns(rig: Rig) -> None:
    brain = ScriptedBrain()
    brain.install(rig.llm)
    await rig.chat.start(ME)
    for i in range(36):
        await rig.chat.reply(ME, f"随便聊聊第{i}句")
        await rig.chat.drain()
    assert 3 <= brain.extraction_calls <= 4, brain.extraction_calls


@pytest.mark.parametrize(
    "answer",
    ["not json at all", "", "[]", '{"items": []}', '{"memories": "感冒"}'],
)
async def test_broken_extraction_keeps_turns_queued(rig: Rig, answer: str) -> None:
    await seed(rig, cold())
    before = [(m.id, m.event, m.importance) for m in await rig.engine.memories(ME)]
    rig.llm.set_json_reply(answer if answer else " ")
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我生病住院了")
    await rig.chat.drain()
    assert await rig.engine.pending_count(ME) == 1
    assert [(m.id, m.event, m.importance) for m in await rig.engine.memories(ME)] == before
    # A later good answer extracts the queued turn: nothing was lost.
    hospital = {**COLD, "event": "2025-12-23 生病住院", "keywords": ["生病", "住院"]}
    rig.llm.set_json_reply(json.dumps({"memories": [hospital]}, ensure_ascii=False))
    result = await rig.engine.consolidate(ME, rig.clock())
    assert result.turns == 1 and result.inserted == 1
    assert await rig.engine.pending_count(ME) == 0


async def test_extraction_items_are_validated(rig: Rig) -> None:
    items = [
        {"event": "2025-12-23 过敏严重", "keywords": ["过敏"], "importance": 9999, "validity": "30d", "type": "fact"},
        {"event": "2025-12-23 喜欢跑步", "keywords": [], "importance": -40, "validity": "forever",
         "type": "preference", "extra": "ignored"},
        {"event": "2025-12-23 不认识的类型", "keywords": ["类型"], "importance": 50, "type": "gossip"},
        {"keywords": ["没有事件"], "importance": 50},
        "not an object",
        {"event": "2025-12-23 重要程度是字符串", "keywords": ["字符串"], "importance": "70", "type": "event"},
    ]
    rig.llm.set_json_reply(json.dumps({"memories": items}, ensure_ascii=False))
    await rig.engine.note_turn(ME, Turn("x", "y", rig.clock()))
    await rig.engine.consolidate(ME, rig.clock())
    stored = {m.event: m for m in await rig.engine.memories(ME)}
    assert set(stored) == {"过敏严重", "喜欢跑步", "重要程度是字符串"}
    assert stored["过敏严重"].importance == 100
    assert stored["喜欢跑步"].importance == 0
    assert stored["喜欢跑步"].validity is Validity.PERMANENT
    assert stored["喜欢跑步"].keywords == ["喜欢", "跑步"]
    assert stored["喜欢跑步"].type is MemoryType.PREFERENCE
    assert stored["重要程度是字符串"].importance == 70


async def test_mention_in_reply_updates_the_memory(rig: Rig) -> None:
    (mid,) = await seed(rig, cold())
    rig.llm.set_chat_reply("感冒好点了吗？")
    await rig.chat.start(ME)
    reply = await rig.chat.reply(ME, "今天不舒服")
    assert reply.mentioned == (mid,)
    (memory,) = await rig.engine.memories(ME)
    assert memory.last_mentioned_at == rig.clock() and memory.mention_count == 1
    rig.llm.set_chat_reply("多休息哦")
    rig.clock.advance(hours=2)
    for _ in range(6):
        await rig.chat.reply(ME, "今天不舒服")
    (memory,) = await rig.engine.memories(ME)
    assert memory.mention_count == 1, "a reply that does not mention it must not count"


async def test_profile_core_in_prompt_and_survives_llm_outage(fake_llm: FakeLLM, tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    first = await open_rig(fake_llm, settings)
    try:
        await first.engine.remember(ME, [MemoryDraft("2025-12-01 对花生过敏", ["花生", "过敏"], 90,
                                                     Validity.PERMANENT, MemoryType.FACT)], first.clock())
        fake_llm.set_json_reply('{"core": "用户对花生过敏，喜欢安静。", "dynamic": '
                                '[{"text": "最近在准备考试", "keywords": ["考试"]}]}')
        await first.chat.start(ME)
        await first.chat.reply(ME, "晚上吃什么好")
        prompt = model_context(fake_llm.chat_requests()[-1])
        assert "用户对花生过敏" in prompt and "最近在准备考试" not in prompt
        await first.chat.reply(ME, "明天考试好紧张")
        assert "最近在准备考试" in model_context(fake_llm.chat_requests()[-1])
    finally:
        await close_rig(first)
    # Restart with the model down: the persisted profile keeps the companion personal.
    second = await open_rig(fake_llm, settings)
    try:
        fake_llm.fail_next(5, status=503)
        await second.chat.start(ME)
        fake_llm.clear()
        await second.chat.reply(ME, "晚上吃什么好")
        assert "用户对花生过敏" in model_context(fake_llm.chat_requests()[-1])
    finally:
        await close_rig(second)


async def test_profile_is_at_most_200_chars(rig: Rig) -> None:
    await seed(rig, cold())
    rig.llm.set_json_reply(json.dumps({"core": "长" * 500, "dynamic": [{"text": "短", "keywords": ["短句"]}]}))
    await rig.chat.start(ME)
    profile = await rig.engine.profile(ME)
    assert profile is not None
    assert len(profile.core) + sum(len(t.text) for t in profile.dynamic) <= 200


async def test_stop_clears_short_term_but_keeps_long_term(rig: Rig) -> None:
    await seed(rig, cold())
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "第一句")
    await rig.chat.stop(ME)
    assert not rig.chat.is_active(ME)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "第二句")
    messages = rig.llm.chat_requests()[-1]["messages"]
    assert [user_words(m["content"]) for m in messages if m["role"] == "user"] == ["第二句"]
    assert len(await rig.engine.memories(ME)) == 1


@pytest.mark.parametrize(
    "text",
    [
        "长" * 4096,
        "😀🎉👩‍👩‍👧 表情",
        "零\u200b宽\u200d字符\ufeff和控制\x00\x07字符",
        "'); DROP TABLE mem_u777; --",
        "*粗体* _斜体_ `代码` <b>html</b> &amp; [链接](http://x)",
    ],
)
async def test_odd_text_through_the_pipeline(rig: Rig, text: str) -> None:
    await seed(rig, cold())
    await rig.chat.start(ME)
    reply = await rig.chat.reply(ME, text)
    assert reply.ok
    (turn,) = await rig.engine.pending_turns(ME, 10)
    # The user's words are kept exactly, but for the control characters no one types (NUL, BEL), which every
    # backend must be able to store: each becomes U+FFFD (core.text.sendable).
    assert turn.user == text.replace("\x00", "\ufffd").replace("\x07", "\ufffd")
    assert len(await rig.engine.memories(ME)) == 1


async def test_users_never_see_each_others_memories(rig: Rig) -> None:
    other = Scope(778)
    await rig.engine.remember(other, [cold()], rig.clock())
    await rig.chat.start(ME)
    reply = await rig.chat.reply(ME, "我今天不舒服，发烧了")
    assert not reply.recalled
    assert "感冒发烧" not in json.dumps(rig.llm.requests, ensure_ascii=False)


async def test_users_never_wait_on_each_others_llm_calls(rig: Rig) -> None:
    import asyncio

    slow, fast = Scope(901), Scope(902)
    await rig.chat.start(slow)
    await rig.chat.start(fast)
    release = asyncio.Event()
    extraction_started = asyncio.Event()

    async def answer(body: dict[str, object]) -> str:
        if is_extraction(body):
            extraction_started.set()
            await release.wait()  # user 901's extraction is stuck at the model until we say so
        return '{"memories": []}'

    rig.llm.set_json_reply(answer)
    await rig.chat.reply(slow, "我住院了")  # important news: extraction starts in the background
    await asyncio.wait_for(extraction_started.wait(), 10)
    # While 901's model call hangs, 902 chats and writes; the timeout only guards against a deadlock.
    reply = await asyncio.wait_for(rig.chat.reply(fast, "你好呀"), 10)
    await asyncio.wait_for(rig.engine.remember(fast, [cold()], rig.clock()), 10)
    assert reply.ok and not release.is_set()
    assert await rig.engine.pending_count(slow) == 1, "901's turn is still waiting for its extraction"
    release.set()
    await rig.chat.drain()
    assert await rig.engine.pending_count(slow) == 0


async def test_forget_removes_the_memory_from_every_prompt_at_once(rig: Rig) -> None:
    (mid,) = await seed(rig, MemoryDraft("2025-12-01 对花生过敏", ["花生", "过敏"], 90, Validity.PERMANENT))
    rig.llm.set_json_reply('{"core": "用户对花生过敏。", "dynamic": []}')
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "晚饭吃什么")
    assert "花生过敏" in model_context(rig.llm.chat_requests()[-1])
    assert await rig.engine.forget(ME, [mid]) == 1
    rig.llm.set_json_reply('{"core": "", "dynamic": []}')
    await rig.chat.reply(ME, "花生酱好吃吗")
    assert "花生过敏" not in model_context(rig.llm.chat_requests()[-1])
    assert await rig.engine.memories(ME) == []


async def test_repeated_news_word_extracts_once(rig: Rig) -> None:
    brain = ScriptedBrain()
    brain.install(rig.llm)
    await rig.chat.start(ME)
    for text in ("我感冒了", "感冒好难受", "还是感冒", "感冒药吃了", "我要离职了"):
        await rig.chat.reply(ME, text)
        await rig.chat.drain()
    assert brain.extraction_calls == 2, "感冒 once, then 离职 once"


@pytest.mark.parametrize(("stored", "calls"), [
    (None, 1),  # news: learned at once
    (MemoryDraft("2025-12-01 感冒了，在家休息", ["感冒", "休息"], 80, Validity.DAYS_30), 0),  # known: it waits
    (MemoryDraft("2025-12-01 喜欢喝奶茶", ["奶茶"], 60, Validity.DAYS_30), 1),  # something else known: news
])
async def test_an_important_word_already_remembered_is_not_news(
    rig: Rig, stored: MemoryDraft | None, calls: int
) -> None:
    if stored is not None:
        await seed(rig, stored)
    brain = ScriptedBrain()
    brain.install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我又感冒了")
    await rig.chat.drain()
    assert brain.extraction_calls == calls
    assert await rig.engine.pending_count(ME) == 1 - calls, "the turn stays queued for the regular extraction"


@pytest.mark.parametrize(("stored", "text", "calls"), [
    (MemoryDraft("对花生过敏", ["花生", "过敏"], 95, Validity.PERMANENT), "对了我对虾也过敏", 1),  # a second allergy
    (MemoryDraft("对花生过敏", ["花生", "过敏"], 95, Validity.PERMANENT), "我对花生过敏你知道的", 0),  # retold
    (MemoryDraft("养了一只橘猫叫布丁", ["布丁", "橘猫", "养了"], 65, Validity.PERMANENT),
     "我又养了一只小狗，叫豆豆", 1),  # a second pet
    (MemoryDraft("在游戏公司做产品经理", ["游戏公司", "产品经理", "工作"], 75, Validity.PERMANENT),
     "我跳槽了，现在在一家银行做数据分析", 1),  # a new job after the old one
    (MemoryDraft("感冒发烧", ["感冒", "发烧"], 85, Validity.DAYS_30), "可能感冒还没好利索", 0),  # 利索: said of it
    (MemoryDraft("感冒发烧", ["感冒", "发烧"], 85, Validity.DAYS_30), "感冒还没好，嗓子太疼了", 1),  # a new symptom
])
async def test_a_new_detail_on_a_known_topic_is_news(rig: Rig, stored: MemoryDraft, text: str, calls: int) -> None:
    await seed(rig, stored)
    brain = ScriptedBrain()
    brain.install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, text)
    await rig.chat.drain()
    assert brain.extraction_calls == calls


async def test_news_in_quick_succession_shares_one_extraction(rig: Rig) -> None:
    brain = ScriptedBrain()
    brain.install(rig.llm)
    await rig.chat.start(ME)
    calls = []
    for text in ("我感冒了", "还有我要搬家了", "对了下周面试", "今天吃了面", "天气不错"):
        await rig.chat.reply(ME, text)
        await rig.chat.drain()
        calls.append(brain.extraction_calls)
    # The first news goes at once; the next two wait for the third turn since then and go together.
    assert calls == [1, 1, 1, 2, 2]


async def test_a_retelling_learned_after_newer_words_merges_into_them_and_keeps_them(rig: Rig) -> None:
    """The ``/reset`` summary of some turns is written before the (slower) extraction of the same turns lands: the
    extraction's older, shorter words must not replace the summary's, and its importance still counts. Found with
    semantic recall on, whose related-memory lookup delays the extraction (tests/test_e2e_month.py)."""
    said = rig.clock()
    await rig.engine.note_turn(ME, Turn("最近在学吉他，每天练半小时", "好呀", said))
    [summary] = await rig.engine.remember(ME, [MemoryDraft("聊到最近在学吉他，手指有点疼", ["吉他", "练琴"], 40,
                                                           Validity.DAYS_7, MemoryType.EVENT)],
                                          said + timedelta(minutes=1))
    rig.llm.set_json_reply(json.dumps({"memories": [{"event": "最近在学吉他", "keywords": ["吉他", "练琴", "乐器"],
                                                     "importance": 60, "type": "event"}]}, ensure_ascii=False))
    await rig.engine.consolidate(ME, said + timedelta(minutes=2))
    [guitar] = await rig.engine.memories(ME)
    assert (guitar.id, guitar.event) == (summary, "聊到最近在学吉他，手指有点疼")
    assert guitar.importance >= 60


async def test_relative_words_are_read_against_the_day_they_were_said(rig: Rig) -> None:
    """Turns queued on a Monday and learned on the Friday after: "周四" is that Monday's Thursday."""
    monday = rig.clock().replace(year=2026, month=12, day=7, hour=2)
    rig.llm.set_json_reply(json.dumps({"memories": [
        {"event": "周四晚上练吉他", "keywords": ["吉他"], "importance": 50, "type": "event"}]}, ensure_ascii=False))
    await rig.engine.note_turn(ME, Turn("周四晚上要练吉他", "好", monday))
    await rig.engine.consolidate(ME, monday.replace(day=11))
    [guitar] = await rig.engine.memories(ME)
    assert guitar.event == "12月10日（周四）晚上练吉他"
    assert guitar.happens is not None and str(guitar.happens.on) == "2026-12-10"
    [prompt] = [r for r in rig.llm.json_requests() if is_extraction(r)]
    assert "今天是 2026-12-07（周一）" in prompt["messages"][-1]["content"]
