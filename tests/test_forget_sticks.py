"""Forgetting sticks: a memory knows the turns it came from, and forgetting it drops exactly those turns
from the extraction queue and from the short-term context (persisted and in-process), whatever their
words; "forget everything" drops every queued turn and the whole short-term context. Driven through the
chat pipeline with the real openai SDK against the fake model, on a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import random
from datetime import timedelta

import pytest

from companion.chat import texts
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import MemoryDraft, MemoryType, Scope, ShortKind, Status, Turn
from companion.core.setting import REVIEW_SENT
from companion.storage.base import EVERY_STATUS
from tests.fakes import FakeLLM
from tests.fakes.llm import JSONDict, request_text
from tests.support import USER, Live, Rig, close_rig, open_rig

ALICE = Scope(1001)
EXTRACT = "你负责从用户和聊天伙伴的对话里提取"
SMALL_TALK = "今天天气还不错"

# (what the user said, what the model saved in its own words, what an extraction would learn again)
TOLD_IN_OTHER_WORDS = [
    ("老板今天跟我说明天不用来上班了", "用户失业了，被公司辞退", "用户被裁员，目前没有工作"),
    ("我跟他彻底掰了，以后不会再联系", "用户和男朋友分手了", "用户和恋人断了联系"),
    ("医生说我是小三阳，要定期复查", "用户确诊乙肝", "用户是乙肝病毒携带者，需要定期复查"),
]


def relearning(llm: FakeLLM, told: str, learned: str) -> None:
    """The fake model learns ``learned`` from any extraction that reads ``told``, nothing otherwise."""
    item = {"event": learned, "keywords": ["记忆"], "importance": 90, "type": "fact", "validity": "permanent"}

    def answer(body: JSONDict) -> str:
        text = request_text(body)
        if EXTRACT in text and told in text:
            return json.dumps({"memories": [item]}, ensure_ascii=False)
        return '{"memories": []}'

    llm.set_json_reply(answer)


def extraction_prompts(llm: FakeLLM) -> list[str]:
    return [t for t in (request_text(r) for r in llm.json_requests()) if EXTRACT in t]


async def next_extraction(rig: Rig, chat: ChatService) -> str:
    """One more ordinary turn, then an extraction: the prompt it sent to the model."""
    rig.llm.clear()
    rig.llm.queue_chat("嗯嗯")
    assert (await chat.reply(ALICE, SMALL_TALK)).ok
    await rig.engine.consolidate(ALICE, rig.clock())
    [prompt] = extraction_prompts(rig.llm)
    return prompt


async def assert_gone_everywhere(rig: Rig, chat: ChatService, told: str, learned: str) -> None:
    prompt = await next_extraction(rig, chat)
    assert SMALL_TALK in prompt and told not in prompt
    events = [m.event for m in await rig.engine.memories(ALICE, EVERY_STATUS)]
    assert not any(learned in e or told in e for e in events)
    # Neither the reply call after the forget nor the persisted short-term context carries the turn.
    [reply_call] = rig.llm.chat_requests()
    assert told not in json.dumps(reply_call["messages"], ensure_ascii=False)
    assert told not in [t.user for t in await rig.engine.recent_turns(ALICE, 200)]
    assert await rig.engine.pending_turns(ALICE, 100) == []


@pytest.mark.parametrize(("told", "saved", "learned"), TOLD_IN_OTHER_WORDS)
async def test_forgetting_a_tool_save_drops_the_turn_it_came_from(
    rig: Rig, tool_chat: ChatService, told: str, saved: str, learned: str
) -> None:
    relearning(rig.llm, told, learned)
    rig.llm.queue_tool_calls(("save_memory", {"content": saved, "type": "fact", "tier": "long", "importance": 90}))
    rig.llm.queue_chat("抱抱你，我在。")
    assert (await tool_chat.reply(ALICE, told)).ok
    await tool_chat.drain()
    [memory] = await rig.engine.memories(ALICE)
    assert memory.event == saved and [t.user for t in await rig.engine.pending_turns(ALICE, 10)] == [told]

    assert await tool_chat.forget(ALICE, [memory.id]) == 1
    await assert_gone_everywhere(rig, tool_chat, told, learned)
    [stone] = await rig.engine.memories(ALICE, {Status.FORGOTTEN})
    assert (stone.id, stone.event, stone.keywords) == (memory.id, "", [])  # content-free


async def test_a_save_and_forget_in_one_reply_never_queues_the_turn(rig: Rig, tool_chat: ChatService) -> None:
    told, saved, learned = TOLD_IN_OTHER_WORDS[0]
    relearning(rig.llm, told, learned)
    rig.llm.queue_tool_calls(("save_memory", {"content": saved, "type": "fact", "tier": "long", "importance": 90}))
    rig.llm.queue_tool_calls(("forget_memory", {"description": "辞退"}))
    rig.llm.queue_chat("好，这件事我不记了。")
    assert (await tool_chat.reply(ALICE, told)).ok
    assert rig.llm.tool_results(rig.llm.chat_requests()[-1])[-1]["forgotten"] == 1
    await tool_chat.drain()
    assert await rig.engine.pending_turns(ALICE, 10) == []
    await assert_gone_everywhere(rig, tool_chat, told, learned)


async def test_forgetting_an_explicit_save_of_the_turn_before_drops_both_turns(
    rig: Rig, tool_chat: ChatService
) -> None:
    told, _, learned = TOLD_IN_OTHER_WORDS[2]
    relearning(rig.llm, told, learned)
    rig.llm.queue_chat("别担心，按时复查就好。")
    assert (await tool_chat.reply(ALICE, told)).ok
    # "这个很重要" saves the turn before, in the model's words.
    rig.llm.queue_json(json.dumps({"event": "用户确诊乙肝", "keywords": ["乙肝"], "type": "fact",
                                   "importance": 90, "core": True}, ensure_ascii=False))
    reply = await tool_chat.reply(ALICE, "这个很重要")
    assert reply.saved is not None and reply.saved.event == "用户确诊乙肝"
    assert await tool_chat.forget(ALICE, [reply.saved.id]) == 1
    await assert_gone_everywhere(rig, tool_chat, told, learned)


async def test_forget_all_right_after_telling_something_never_learns_it(rig: Rig, tool_chat: ChatService) -> None:
    told, learned = "我家有只猫，叫咪咪", "用户家有一只叫咪咪的猫"
    relearning(rig.llm, told, learned)
    rig.llm.queue_chat("好可爱！")
    assert (await tool_chat.reply(ALICE, told)).ok
    rig.llm.queue_chat("哈哈")
    assert (await tool_chat.reply(ALICE, "它特别黏人")).ok  # a conversation a summary would sum up
    await tool_chat.drain()
    assert len(await rig.engine.pending_turns(ALICE, 10)) == 2

    await tool_chat.forget(ALICE, None)
    assert await rig.engine.pending_turns(ALICE, 10) == []
    assert await rig.engine.recent_turns(ALICE, 200) == []
    await assert_gone_everywhere(rig, tool_chat, told, learned)
    # A conversation summary at /reset has nothing of it either.
    rig.llm.clear()
    await tool_chat.reset(ALICE)
    assert not any("咪咪" in request_text(r) for r in rig.llm.requests)


async def test_forget_all_through_telegram_drops_the_queued_turn(live: Live) -> None:
    scope = Scope(USER)
    told, learned = "我家有只猫，叫咪咪", "用户家有一只叫咪咪的猫"
    await live.say("/start_aiGF", 1)
    live.llm.queue_json(json.dumps({"event": "喜欢奶茶", "keywords": ["奶茶"], "type": "preference",
                                    "importance": 60}, ensure_ascii=False))
    await live.say("记住：我喜欢奶茶", 2)
    relearning(live.llm, told, learned)
    live.llm.queue_chat("好可爱！")
    await live.say(told, 3)
    assert await live.say("/forget all", 4) == texts.confirm_forget_all(1)
    await live.press(USER, live.tg.sent_messages(USER)[-1], "确定", 1)
    await live.tg.wait_for_edit(USER, int(live.tg.sent_messages(USER)[-1]["message_id"]), "忘掉")
    assert await live.rig.engine.pending_turns(scope, 10) == []

    live.llm.clear()
    live.llm.queue_chat("辛苦啦")
    await live.say(SMALL_TALK, 5)
    await live.rig.engine.consolidate(scope, live.rig.clock())
    [prompt] = extraction_prompts(live.llm)
    assert SMALL_TALK in prompt and told not in prompt
    assert await live.rig.engine.memories(scope) == []
    assert all(told not in json.dumps(r["messages"], ensure_ascii=False) for r in live.llm.chat_requests())


async def test_forgetting_in_a_review_answer_drops_the_turn_from_the_restored_context(
    rig: Rig, tool_chat: ChatService
) -> None:
    told, saved, learned = TOLD_IN_OTHER_WORDS[1]
    relearning(rig.llm, told, learned)
    await tool_chat.start(ALICE)
    rig.llm.queue_tool_calls(("save_memory", {"content": saved, "type": "fact", "tier": "medium", "importance": 70}))
    rig.llm.queue_chat("抱抱。")
    assert (await tool_chat.reply(ALICE, told)).ok
    await tool_chat.drain()
    # A restart: the next conversation restores the short-term turns and opens with the review left unanswered.
    rig.clock.advance(days=40)
    await rig.engine.set_setting(REVIEW_SENT, ALICE, rig.clock() - timedelta(days=4))
    restarted = ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock,
                            rng=random.Random(1))
    await restarted.load()
    rig.llm.queue_chat("回来啦")
    assert (await restarted.reply(ALICE, "我回来啦")).text.startswith("有1条记忆待处理")
    assert "已忘掉" in (await restarted.reply(ALICE, "第一个删除")).text
    assert [m.status for m in await rig.engine.memories(ALICE, EVERY_STATUS)] == [Status.FORGOTTEN]
    rig.llm.clear()
    rig.llm.queue_chat("嗯嗯")
    assert (await restarted.reply(ALICE, SMALL_TALK)).ok
    [reply_call] = rig.llm.chat_requests()
    assert told not in json.dumps(reply_call["messages"], ensure_ascii=False)
    await restarted.drain()
    assert told not in [t.user for t in await rig.engine.pending_turns(ALICE, 10)]


async def test_extraction_never_reads_a_turn_a_forgotten_memory_came_from(rig: Rig) -> None:
    told, saved, learned = TOLD_IN_OTHER_WORDS[0]
    relearning(rig.llm, told, learned)
    now = rig.clock()
    draft = MemoryDraft(event=saved, keywords=[], importance=90.0, type=MemoryType.FACT, source_turns=("k1",))
    memory = await rig.engine.save_draft(ALICE, draft, now)
    assert await rig.engine.forget(ALICE, [memory.id]) == 1
    # The turn reaches the queue only after the forget (a reply still being answered, another process).
    for _ in range(rig.engine.extract_batch):
        await rig.store.add_turn(ALICE, Turn(user=told, reply="嗯", at=now, key="k1"))
    await rig.store.add_turn(ALICE, Turn(user=SMALL_TALK, reply="嗯", at=now, key="k2"))
    assert (await rig.engine.consolidate(ALICE, now)).turns == 1
    [prompt] = extraction_prompts(rig.llm)
    assert SMALL_TALK in prompt and told not in prompt
    assert await rig.engine.pending_turns(ALICE, 100) == []
    assert await rig.engine.memories(ALICE) == []


@pytest.mark.parametrize("ask", ["/forget all", "全部忘掉"])
async def test_forget_all_with_no_memory_yet_still_drops_the_queued_turn(live: Live, ask: str) -> None:
    """Nothing learned yet is no reason to keep what was said: the wipe is offered and done all the same."""
    scope = Scope(USER)
    told, learned = "我家有只猫，叫咪咪", "用户家有一只叫咪咪的猫"
    await live.say("/start_aiGF", 1)
    relearning(live.llm, told, learned)
    live.llm.queue_chat("好可爱！")
    await live.say(told, 2)
    assert [t.user for t in await live.rig.engine.pending_turns(scope, 10)] == [told]
    assert await live.say(ask, 3) == texts.confirm_forget_all(0)
    asking = live.tg.sent_messages(USER)[-1]
    assert [t for t, _ in live.tg.buttons(asking)] == ["确定清掉", "取消"]
    await live.press(USER, asking, "确定", 1)
    done = await live.tg.wait_for_edit(USER, int(asking["message_id"]), "清掉了")
    assert done["text"] == texts.forgot_all(0)
    assert await live.rig.engine.pending_turns(scope, 10) == []
    assert await live.rig.engine.recent_turns(scope, 200) == []

    live.llm.clear()
    live.llm.queue_chat("辛苦啦")
    await live.say(SMALL_TALK, 4)
    await live.rig.engine.consolidate(scope, live.rig.clock())
    [prompt] = extraction_prompts(live.llm)
    assert SMALL_TALK in prompt and told not in prompt
    assert await live.rig.engine.memories(scope) == []
    assert all(told not in json.dumps(r["messages"], ensure_ascii=False) for r in live.llm.chat_requests())


async def test_forget_all_drops_what_still_waits_in_the_message_buffer(live: Live) -> None:
    """Said just before the press and not answered yet (the quiet period is still running): it goes with
    the rest, never answered, queued or learned."""
    scope = Scope(USER)
    await live.say("/start_aiGF", 1)
    assert await live.say("/forget all", 2) == texts.confirm_forget_all(0)
    asking = live.tg.sent_messages(USER)[-1]
    live.buffer.quiet_seconds = 30.0  # the text below waits in the buffer until the press has been handled
    told = "我养了一只猫，叫咪咪"
    live.tg.push_text(USER, told)
    for _ in range(200):  # updates are handled concurrently: press once the text is buffered
        if live.buffer.pending(scope):
            break
        await asyncio.sleep(0.01)
    assert live.buffer.pending(scope) == [told]
    await live.press(USER, asking, "确定", 1)
    await live.tg.wait_for_edit(USER, int(asking["message_id"]), "清掉了")
    assert live.buffer.pending(scope) == []
    await live.buffer.close()
    await live.rig.chat.drain()
    assert await live.rig.engine.pending_turns(scope, 10) == []
    assert len(live.tg.sent_messages(USER)) == 2
    assert all(told not in json.dumps(r["messages"], ensure_ascii=False) for r in live.llm.requests)


@pytest.mark.parametrize("forget_all", [False, True])
async def test_a_forget_in_another_process_reaches_the_conversation_this_one_holds(rig: Rig, forget_all: bool) -> None:
    """Workers and the operator's commands are other processes on the same database: what one of them forgot
    must not reach the model from the turns this process keeps in its session."""
    told, saved, _ = TOLD_IN_OTHER_WORDS[2]
    other = await open_rig(rig.llm, rig.settings, rig.clock)
    try:
        rig.llm.queue_chat("嗯，我记住了", "好的")
        assert (await rig.chat.reply(ALICE, told)).ok
        assert (await rig.chat.reply(ALICE, SMALL_TALK)).ok
        [key] = [item.keys[0] for item in await rig.store.short_items(ALICE, ShortKind.TURN, 10) if item.user == told]
        draft = MemoryDraft(event=saved, keywords=["乙肝"], importance=90.0, type=MemoryType.FACT, source_turns=(key,))
        memory = await other.engine.save_draft(ALICE, draft, rig.clock())
        assert await other.chat.forget(ALICE, None if forget_all else [memory.id]) >= 1
        rig.llm.clear()
        rig.llm.queue_chat("嗯嗯")
        assert (await rig.chat.reply(ALICE, "周末去哪儿玩好呢")).ok
        [request] = rig.llm.chat_requests()
        sent = request_text(request)
        assert "小三阳" not in sent and saved not in sent
        assert (SMALL_TALK in sent) is not forget_all, "what was not forgotten stays in the conversation"
    finally:
        await close_rig(other)
