"""The memory tools through the real pipeline: the fake model scripts tool calls, the real openai SDK
sends them, the tools act on a real SQLite engine bound to the caller's scope."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest

from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.engine.tools import memory_tools
from companion.llm.client import ToolCall
from companion.llm.toolkit import Toolset
from companion.storage.base import EVERY_STATUS
from tests.support import Rig

ALICE, BOB = Scope(1001), Scope(2002)
TALK = "顺便说一下，最近在准备搬家"


@pytest.fixture
def chat(tool_chat: ChatService) -> ChatService:
    return tool_chat


async def remember(rig: Rig, scope: Scope, text: str, tier: Tier = Tier.MEDIUM) -> Memory:
    draft = MemoryDraft(event=text, keywords=[], importance=60, type=MemoryType.FACT, tier=tier,
                        validity={Tier.LONG: Validity.PERMANENT, Tier.MEDIUM: Validity.DAYS_30,
                                  Tier.SHORT: Validity.DAYS_7}[tier])
    return await rig.engine.save_draft(scope, draft, rig.clock())


def results(rig: Rig) -> list[Any]:
    """The tool messages the model got back in the follow-up request of the last reply."""
    return rig.llm.tool_results(rig.llm.chat_requests()[-1])


async def snapshot(rig: Rig, scope: Scope) -> list[dict[str, Any]]:
    return [asdict(m) for m in await rig.engine.memories(scope, EVERY_STATUS)]


async def test_save_memory_keeps_different_facts_apart_and_names_replaced_words(rig: Rig, chat: ChatService) -> None:
    await remember(rig, ALICE, "周二晚上要练吉他")
    peanut = await remember(rig, ALICE, "我对花生过敏")
    rig.llm.queue_tool_calls(("save_memory", {"content": "周四晚上要练吉他"}),
                             ("save_memory", {"content": "我花生过敏，吃了会起疹子", "type": "fact"}))
    rig.llm.queue_chat("好的，记下了。")
    await chat.reply(ALICE, "周四晚上也要练吉他，对了我花生过敏，吃了会起疹子")
    thursday, retold = results(rig)
    assert "replaced_words" not in thursday
    assert retold["saved"]["handle"] == peanut.id and retold["replaced_words"] == "我对花生过敏"
    # The tool's "周四" is the coming Thursday, stored as its date (the seeded "周二" was stored as given).
    events = sorted(m.event for m in await rig.engine.memories(ALICE))
    others = [e for e in events if not e.endswith("（周四）晚上要练吉他")]
    assert others == ["周二晚上要练吉他", "我花生过敏，吃了会起疹子"]
    assert len(events) == 3


async def test_save_memory_stores_what_the_model_judged(rig: Rig, chat: ChatService) -> None:
    rig.llm.queue_tool_calls(("save_memory", {"content": "对花生过敏", "type": "fact", "tier": "long",
                                              "importance": 90}))
    rig.llm.queue_chat("好，我记住了，以后会注意花生。")
    reply = await chat.reply(ALICE, "我对花生过敏哦")
    assert reply.ok and reply.tool_calls == 1 and "花生" in reply.text
    [saved] = results(rig)
    [memory] = await rig.engine.memories(ALICE)
    assert saved["saved"]["handle"] == memory.id and memory.event == "对花生过敏"
    assert (memory.tier, memory.origin, memory.importance) == (Tier.LONG, Origin.TOOL, 90)
    first = rig.llm.chat_requests()[0]
    assert {t["function"]["name"] for t in first["tools"]} == {
        "save_memory", "search_memories", "update_memory", "forget_memory", "list_memories", "move_memory",
        "archive_memory", "get_due_memories"}
    # No tool parameter can name a user, a chat or a table.
    for tool in first["tools"]:
        assert not {"user_id", "chat_id", "scope", "table"} & set(tool["function"]["parameters"]["properties"])


async def test_another_users_handle_fails_like_a_missing_one_and_changes_nothing(rig: Rig, chat: ChatService) -> None:
    theirs = await remember(rig, BOB, "Bob 的银行卡密码提示")
    mine = await remember(rig, ALICE, "喜欢爬山")
    before_bob, before_alice = await snapshot(rig, BOB), await snapshot(rig, ALICE)
    rig.llm.queue_tool_calls(
        ("update_memory", {"handle": theirs.id, "content": "改掉"}),
        ("forget_memory", {"handle": theirs.id}),
        ("archive_memory", {"handle": theirs.id}),
        ("move_memory", {"handle": theirs.id, "tier": "short"}),
    )
    rig.llm.queue_chat("嗯嗯")
    reply = await chat.reply(ALICE, TALK)
    assert reply.ok and reply.text == "嗯嗯"
    answers = results(rig)
    missing = f"no memory with handle {theirs.id} among this user's memories"
    assert answers == [{"error": missing}] * 4
    assert await snapshot(rig, BOB) == before_bob
    assert await snapshot(rig, ALICE) == before_alice and mine.id != theirs.id


async def test_bad_arguments_get_structured_errors_and_change_nothing(rig: Rig, chat: ChatService) -> None:
    mine = await remember(rig, ALICE, "喜欢爬山")
    before = await snapshot(rig, ALICE)
    rig.llm.queue_tool_calls(
        ("update_memory", {"handle": "abc", "content": "x"}),
        ("forget_memory", {"handle": mine.id, "user_id": BOB.user_id}),
        ("save_memory", '{"content": "坏的 JSON'),
        ("update_memory", {"handle": mine.id, "importance": 500}),
    )
    rig.llm.queue_tool_calls(
        ("update_memory", {"handle": mine.id}),
        ("forget_memory", {}),
        ("search_memories", {"query": "爬山", "since": "2025-13-40"}),
        ("no_such_tool", {}),
    )
    rig.llm.queue_chat("好的")
    reply = await chat.reply(ALICE, TALK)
    assert reply.ok and reply.text == "好的"
    first, both = (rig.llm.tool_results(body) for body in rig.llm.chat_requests()[-2:])
    second = both[len(first):]
    assert [a["error"] for a in first] == ["invalid arguments", "invalid arguments", "arguments are not valid JSON",
                                           "invalid arguments"]
    assert first[1]["problems"][0]["argument"] == "user_id"
    assert [a["error"] for a in second] == ["give content or importance (or both)",
                                            "give exactly one of handle or description",
                                            "since '2025-13-40' is not a real date (YYYY-MM-DD)",
                                            "unknown tool 'no_such_tool'"]
    assert await snapshot(rig, ALICE) == before


async def test_search_update_move_archive_and_list(rig: Rig, chat: ChatService) -> None:
    hiking = await remember(rig, ALICE, "喜欢周末去爬山")
    await remember(rig, ALICE, "养了一只猫叫团子", Tier.LONG)
    await remember(rig, BOB, "也喜欢爬山")
    rig.llm.queue_tool_calls(("search_memories", {"query": "爬山", "limit": 5}),
                             ("list_memories", {"tier": "long"}))
    rig.llm.queue_tool_calls(("update_memory", {"handle": hiking.id, "content": "喜欢周日去爬山", "importance": 75}),
                             ("move_memory", {"handle": hiking.id, "tier": "long"}))
    rig.llm.queue_chat("记得呀")
    assert (await chat.reply(ALICE, "你还记得我喜欢做什么吗")).ok
    requests = rig.llm.chat_requests()
    found, listed = rig.llm.tool_results(requests[-2])
    assert [m["handle"] for m in found["memories"]] == [hiking.id]  # Bob's hiking is not Alice's
    assert [m["content"] for m in listed["memories"]] == ["养了一只猫叫团子"] and listed["total"] == 1
    after = await rig.engine.get(ALICE, hiking.id)
    assert (after.event, after.importance, after.tier) == ("喜欢周日去爬山", 75, Tier.LONG)

    rig.llm.queue_tool_calls(("archive_memory", {"handle": hiking.id}))
    rig.llm.queue_chat("好")
    assert (await chat.reply(ALICE, TALK)).ok
    assert (await rig.engine.get(ALICE, hiking.id)).status is Status.ARCHIVED


async def test_forget_by_description_asks_when_ambiguous_and_scrubs_context(rig: Rig, chat: ChatService) -> None:
    rig.llm.queue_chat("收到")
    assert (await chat.reply(ALICE, "我前任叫小李")).ok
    ex = await remember(rig, ALICE, "前任叫小李")
    await remember(rig, ALICE, "前任的生日在五月")
    rig.llm.queue_tool_calls(("forget_memory", {"description": "前任"}))
    rig.llm.queue_tool_calls(("forget_memory", {"handle": ex.id}))
    rig.llm.queue_chat("已经忘掉了")
    assert (await chat.reply(ALICE, "把前任的事忘了吧")).ok
    first, second = (rig.llm.tool_results(body)[-1] for body in rig.llm.chat_requests()[-2:])
    assert first["forgotten"] == 0 and len(first["candidates"]) == 2
    assert second == {"forgotten": 1, "handle": ex.id}
    assert [m.event for m in await rig.engine.memories(ALICE)] == ["前任的生日在五月"]
    rig.llm.queue_chat("嗯")
    await chat.reply(ALICE, TALK)
    assert "小李" not in json.dumps(rig.llm.chat_requests()[-1]["messages"], ensure_ascii=False)


async def test_due_memories_come_with_a_suggestion(rig: Rig, chat: ChatService) -> None:
    short = await remember(rig, ALICE, "这周在减肥", Tier.SHORT)
    rig.clock.advance(days=10)
    rig.llm.queue_tool_calls(("get_due_memories", {"days_overdue": 2}), ("get_due_memories", {"days_overdue": 30}))
    rig.llm.queue_chat("好")
    assert (await chat.reply(ALICE, TALK)).ok
    due, none = results(rig)
    [item] = due["due"]
    assert item["handle"] == short.id and item["suggestion"] == "archive" and item["reason"]
    assert item["days_overdue"] >= 2 and none == {"due": []}


async def test_tools_off_is_the_plain_call(rig: Rig) -> None:
    config = ChatConfig.from_settings(rig.settings)
    off = ChatService(rig.engine, rig.client, ChatConfig(**{**asdict_config(config), "tools_enabled": False}),
                      clock=rig.clock, tools=memory_tools(rig.engine, clock=rig.clock))
    assert (await off.reply(ALICE, TALK)).ok
    body = rig.llm.chat_requests()[-1]
    assert "tools" not in body and "tool_choice" not in body
    await off.drain()


def asdict_config(config: ChatConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in ChatConfig.__dataclass_fields__}


async def test_results_are_bounded(rig: Rig, chat: ChatService) -> None:
    for n in range(25):
        words = "".join(chr(0x4E00 + (n * 7919 + k * 104729) % 20000) for k in range(200))
        await remember(rig, ALICE, f"第{n}件事：{words}")
    rig.llm.queue_tool_calls(("list_memories", {}))
    rig.llm.queue_chat("好")
    assert (await chat.reply(ALICE, TALK)).ok
    body = rig.llm.chat_requests()[-1]
    content = next(m["content"] for m in body["messages"] if m.get("role") == "tool")
    [listed] = results(rig)
    assert len(content) <= 3000 and listed["total"] == 25 and listed.get("truncated") is True
    assert 0 < len(listed["memories"]) <= 20


async def test_any_host_gets_the_same_tools_from_the_engine_bound_to_its_scope(rig: Rig) -> None:
    """No chat layer: a host asks the engine for the tools of a scope and dispatches the model's calls."""
    alice, bob = Toolset(rig.engine.tools()(ALICE)), Toolset(rig.engine.tools()(BOB))
    assert alice.names == ["save_memory", "search_memories", "update_memory", "forget_memory", "list_memories",
                           "move_memory", "archive_memory", "get_due_memories"]
    saved = await alice.dispatch(ToolCall("c1", "save_memory", json.dumps({"content": "我对花生过敏"})))
    handle = json.loads(saved.content)["saved"]["handle"]
    probe = await bob.dispatch(ToolCall("c2", "forget_memory", json.dumps({"handle": handle})))
    assert not probe.ok and "no memory with handle" in json.loads(probe.content)["error"]
    found = await alice.dispatch(ToolCall("c3", "search_memories", json.dumps({"query": "花生"})))
    assert [m["handle"] for m in json.loads(found.content)["memories"]] == [handle]
    gone = await alice.dispatch(ToolCall("c4", "forget_memory", json.dumps({"handle": handle})))
    assert json.loads(gone.content) == {"forgotten": 1, "handle": handle}
    assert await rig.engine.memories(ALICE) == []


async def test_save_memory_with_an_exact_lifetime_ends_then(rig: Rig) -> None:
    """``valid_seconds`` (the AstrBot plugin's per-user design's ``valid_time``): the memory's own end, after
    which no tool lists or finds it and the nightly cleanup removes it; the tier is what the model said."""
    tools = Toolset(memory_tools(rig.engine, clock=rig.clock)(ALICE))
    call = ToolCall("1", "save_memory", json.dumps({"content": "今晚八点看球", "valid_seconds": 3600}))
    handle = json.loads((await tools.dispatch(call)).content)["saved"]["handle"]
    [memory] = await rig.engine.memories(ALICE)
    assert (memory.id, memory.tier, memory.validity) == (handle, Tier.MEDIUM, Validity.DAYS_7)
    assert memory.expires_at == memory.created_at + timedelta(hours=1)
    rig.clock.advance(minutes=61)
    listed = await tools.dispatch(ToolCall("2", "list_memories", "{}"))
    found = await tools.dispatch(ToolCall("3", "search_memories", json.dumps({"query": "看球"})))
    assert json.loads(listed.content)["memories"] == json.loads(found.content)["memories"] == []
    await rig.engine.decay(rig.clock())
    assert await rig.engine.memories(ALICE) == []
    short = ToolCall("4", "save_memory", json.dumps({"content": "今晚看球", "valid_seconds": 59}))
    assert not (await tools.dispatch(short)).ok
