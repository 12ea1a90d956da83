"""The tool loop, usage records and the fake's tool and embedding routes, through the real openai SDK."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from typing import Annotated, Any
from zoneinfo import ZoneInfo

import pytest
from openai import AsyncOpenAI, BadRequestError
from pydantic import Field

from companion.core.errors import LLMBadResponseError, LLMUnavailableError
from companion.core.usage import UsageRecord, UsageTotals
from companion.llm.client import LLMClient
from companion.llm.loop import LoopLimits, run_tool_loop
from companion.llm.toolkit import Tool, Toolset
from tests.fakes import FakeLLM
from tests.fakes.llm import ToolCallAnswer, embedding

MESSAGES = [{"role": "system", "content": "你是小伴"}, {"role": "user", "content": "记住我对花生过敏"}]
WHEN = datetime(2025, 12, 23, 17, 30, tzinfo=UTC)  # 01:30 the next day in Shanghai


@pytest.fixture
async def client(fake_llm: FakeLLM) -> AsyncIterator[tuple[LLMClient, list[UsageRecord]]]:
    records: list[UsageRecord] = []

    async def keep(record: UsageRecord) -> None:
        records.append(record)

    llm = LLMClient(api_key="sk-test", base_url=fake_llm.base_url, model="deepseek-chat", max_retries=0,
                    timeout=5, usage_sink=keep, clock=lambda: WHEN)
    try:
        yield llm, records
    finally:
        await llm.close()


def memory_tools(saved: list[str]) -> Toolset:
    async def save_memory(content: Annotated[str, Field(min_length=1, max_length=40)],
                          importance: Annotated[int, Field(ge=0, le=100)] = 50) -> dict[str, object]:
        """Save one thing about the user.

        Args:
            content: what to remember.
            importance: 0-100.
        """
        saved.append(content)
        return {"saved": True, "handle": f"m{len(saved)}"}

    async def slow_search(query: str) -> list[str]:
        """Search slowly."""
        await asyncio.sleep(5)
        return [query]

    return Toolset([Tool.function(save_memory), Tool.function(slow_search)])


async def test_without_tools_the_request_is_the_plain_chat_call(
    fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]
) -> None:
    llm, _ = client
    result = await run_tool_loop(llm, MESSAGES, Toolset())
    assert result.text == "好的，我在听。" and result.calls == 1 and not result.outcomes
    (body,) = fake_llm.requests
    assert set(body) == {"model", "messages", "temperature", "max_tokens"}


async def test_a_tool_call_then_an_answer(fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]) -> None:
    llm, records = client
    saved: list[str] = []
    fake_llm.queue_tool_calls(("save_memory", {"content": "对花生过敏", "importance": 90}))
    fake_llm.queue_chat("记住啦，以后会注意花生的。")
    result = await run_tool_loop(llm, MESSAGES, memory_tools(saved))
    assert result.text == "记住啦，以后会注意花生的。" and saved == ["对花生过敏"]
    assert result.calls == 2 and not result.bounded and [o.ok for o in result.outcomes] == [True]
    first, second = fake_llm.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["save_memory", "slow_search"]
    assert first["tool_choice"] == "auto" and first["messages"] == MESSAGES
    assistant, tool = second["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["function"]["name"] == "save_memory"
    assert tool == {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"],
                    "content": '{"saved":true,"handle":"m1"}'}
    assert second["tools"] == first["tools"], "the tool definitions stay in the cached prefix"
    assert [(r.purpose, r.tool_calls) for r in records] == [("reply", 1), ("reply_tool", 0)]


async def test_a_bad_call_is_answered_to_the_model_and_the_user_still_gets_a_reply(
    fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]
) -> None:
    llm, _ = client
    saved: list[str] = []
    fake_llm.queue_tool_calls(("save_memory", {"content": "x", "importance": 900, "user_id": 2}),
                              ("forget_all", "{}"), ("save_memory", '{"content": '))
    fake_llm.queue_chat("好的～")
    result = await run_tool_loop(llm, MESSAGES, memory_tools(saved))
    assert result.text == "好的～" and saved == []
    errors = [json.loads(o.content)["error"] for o in result.outcomes]
    assert errors == ["invalid arguments", "unknown tool 'forget_all'", "arguments are not valid JSON"]
    problems = json.loads(result.outcomes[0].content)["problems"]
    assert {p["argument"] for p in problems} == {"importance", "user_id"}
    assert len(fake_llm.tool_results(fake_llm.requests[-1])) == 3


async def test_rounds_are_bounded_and_the_last_call_forbids_tools(
    fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]
) -> None:
    llm, _ = client
    saved: list[str] = []
    fake_llm.set_chat_reply(lambda body: "最后的回答" if body.get("tool_choice") == "none"
                            else ToolCallAnswer([("save_memory", {"content": "又一条"})]))
    result = await run_tool_loop(llm, MESSAGES, memory_tools(saved), limits=LoopLimits(max_rounds=2))
    assert result.text == "最后的回答" and result.bounded and result.calls == 3
    assert [r.get("tool_choice") for r in fake_llm.requests] == ["auto", "auto", "none"]
    assert saved == ["又一条", "又一条"]


async def test_time_is_bounded(fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]) -> None:
    llm, _ = client
    fake_llm.queue_tool_calls(("slow_search", {"query": "花生"}), ("save_memory", {"content": "花生"}))
    fake_llm.queue_chat("先聊点别的吧")
    result = await run_tool_loop(llm, MESSAGES, memory_tools([]), limits=LoopLimits(max_seconds=0.2))
    assert result.text == "先聊点别的吧" and result.bounded
    errors = [json.loads(o.content)["error"] for o in result.outcomes]
    assert errors[0].startswith("the tool took too long") and errors[1].startswith("not run: no time left")
    assert fake_llm.requests[-1]["tool_choice"] == "none"


async def test_calls_per_answer_are_bounded(fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]) -> None:
    llm, _ = client
    saved: list[str] = []
    fake_llm.queue_tool_calls(*[("save_memory", {"content": f"第{i}条"}) for i in range(5)])
    fake_llm.queue_chat("嗯")
    result = await run_tool_loop(llm, MESSAGES, memory_tools(saved), limits=LoopLimits(max_calls_per_round=2))
    assert saved == ["第0条", "第1条"]
    assert [o.ok for o in result.outcomes] == [True, True, False, False, False]
    assert len(fake_llm.tool_results(fake_llm.requests[-1])) == 5, "every call id gets its tool message"


async def test_tool_calls_where_words_are_required_are_a_bad_response(
    fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]
) -> None:
    llm, _ = client
    fake_llm.set_chat_reply(ToolCallAnswer([("save_memory", {"content": "x"})]))
    with pytest.raises(LLMBadResponseError, match="answer in words"):
        await run_tool_loop(llm, MESSAGES, memory_tools([]), limits=LoopLimits(max_rounds=1))


async def test_usage_records_carry_cache_split_latency_and_failures(
    fake_llm: FakeLLM, client: tuple[LLMClient, list[UsageRecord]]
) -> None:
    llm, records = client
    await llm.chat(MESSAGES)
    await llm.chat([*MESSAGES, {"role": "assistant", "content": "好"}, {"role": "user", "content": "再说一遍"}])
    fake_llm.fail_next(status=500)
    with pytest.raises(LLMUnavailableError):
        await llm.chat(MESSAGES, purpose="profile")
    first, second, failed = records
    totals = UsageTotals()
    for record in records:
        totals.add(record)
    assert first.cache_hit_tokens == 0 and first.cache_miss_tokens == first.prompt_tokens > 0
    assert second.cache_hit_tokens is not None and second.cache_hit_tokens >= first.prompt_tokens - 1
    assert second.cache_hit_tokens + (second.cache_miss_tokens or 0) == second.prompt_tokens
    assert first.latency_ms > 0 and first.model == "deepseek-chat" and first.at == WHEN
    assert not failed.ok and failed.prompt_tokens == 0 and failed.purpose == "profile"
    cells = totals.cells
    assert set(cells) == {(date(2025, 12, 23), "reply"), (date(2025, 12, 23), "profile")}
    reply = totals.by_purpose()["reply"]
    assert reply.calls == 2 and reply.cache_hit_share is not None and 0 < reply.cache_hit_share < 1
    assert totals.by_day()[date(2025, 12, 23)].failures == 1
    assert totals.calls() == {"reply": 2, "profile": 1}
    assert reply.cache_miss_tokens == (first.cache_miss_tokens or 0) + (second.cache_miss_tokens or 0)
    assert first.prompt_chars == len("你是小伴记住我对花生过敏") and first.completion_chars == len("好的，我在听。")


async def test_a_failing_sink_never_fails_the_call_nor_the_other_sinks(
    fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(record: UsageRecord) -> None:
        raise RuntimeError("table gone")

    llm = LLMClient(api_key="sk-test", base_url=fake_llm.base_url, model="deepseek-chat", max_retries=0,
                    usage_sink=broken)
    tally = UsageTotals()
    llm.usage_sinks.append(tally)  # after the broken one: it still gets every record
    try:
        with caplog.at_level(logging.ERROR):
            assert await llm.chat(MESSAGES) == "好的，我在听。"
    finally:
        await llm.close()
    assert [r.getMessage() for r in caplog.records] == ["usage sink failed for a reply call"]
    assert tally.calls() == {"reply": 1}


def test_totals_group_by_local_day() -> None:
    totals = UsageTotals(tz=ZoneInfo("Asia/Shanghai"))
    for at in (WHEN, WHEN.replace(hour=15)):
        totals.add(UsageRecord(at, "reply", "deepseek-chat", 100, 10, 80, 20, 5.0))
    totals.add(UsageRecord(WHEN, "extraction", "deepseek-chat", 300, 50, None, None, 9.0))
    assert sorted(totals.cells) == [(date(2025, 12, 23), "reply"), (date(2025, 12, 24), "extraction"),
                                    (date(2025, 12, 24), "reply")]
    assert totals.by_purpose()["extraction"].cache_hit_share is None
    assert totals.by_purpose()["reply"].cache_hit_share == 0.8


async def test_fake_refuses_what_the_real_api_refuses(fake_llm: FakeLLM) -> None:
    async with AsyncOpenAI(api_key="sk-test", base_url=fake_llm.base_url, max_retries=0) as sdk:
        dangling: list[Any] = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "hello?"},
        ]
        with pytest.raises(BadRequestError, match="tool message"):
            await sdk.chat.completions.create(model="deepseek-chat", messages=dangling)
        with pytest.raises(BadRequestError, match="json"):
            await sdk.chat.completions.create(model="deepseek-chat", messages=[{"role": "user", "content": "hi"}],
                                              response_format={"type": "json_object"})
        fake_llm.queue_tool_calls(("f", {}))
        with pytest.raises(BadRequestError, match="offered none"):
            await sdk.chat.completions.create(model="deepseek-chat", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("encoding", [{"encoding_format": "float"}, {}])
async def test_embeddings_are_deterministic_unit_vectors(fake_llm: FakeLLM, encoding: dict[str, Any]) -> None:
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    fake_llm.embedding_dim = 16
    async with AsyncOpenAI(api_key="sk-test", base_url=fake_llm.base_url, max_retries=0) as sdk:
        first = await sdk.embeddings.create(model="embed", input=["花生过敏", "喜欢猫"], **encoding)
        again = await sdk.embeddings.create(model="embed", input="花生过敏", **encoding)
    assert fake_llm.embedding_requests[0].get("encoding_format") == encoding.get("encoding_format", "base64")
    vectors = [d.embedding for d in first.data]
    assert [len(v) for v in vectors] == [16, 16]
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-5) for v in vectors)
    assert again.data[0].embedding == pytest.approx(vectors[0], rel=1e-6)
    assert vectors[0] != pytest.approx(vectors[1])
    assert vectors[0] == pytest.approx(embedding("花生过敏", 16), rel=1e-6)
    assert len(fake_llm.embedding_requests) == 2 and not fake_llm.requests
