"""The prompt-cache measure of ``python -m bench cost`` and a tiny run with the stand-in tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import cli
from bench.cache import cache_shares, prompt_stream, share_summary
from bench.cost import CostConfig, run_cost

SYSTEM = {"role": "system", "content": "你是小伴" * 50}


def call(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "deepseek-chat", "messages": [SYSTEM, *messages]}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_growing_conversation_hits_everything_before_the_new_turn() -> None:
    first = call(user("你好"))
    second = call(user("你好"), {"role": "assistant", "content": "嗨"}, user("今天好累"))
    shares = cache_shares([first, second])
    assert shares[0]["prefix"] == 0 and shares[0]["units"] == 0
    assert 0.9 < shares[1]["prefix"] < 1
    assert shares[1]["units"] == pytest.approx(shares[1]["prefix"]), "the previous input is a whole unit"


def test_a_changing_system_message_hits_almost_nothing() -> None:
    bodies = [{"model": "m", "messages": [{"role": "system", "content": f"现在是 10:0{i}" + "你是小伴" * 50},
                                          user("你好")]} for i in range(4)]
    assert all(s["prefix"] < 0.05 for s in cache_shares(bodies))


def test_units_need_a_whole_earlier_prefix() -> None:
    # Each call carries volatile text in its last message: the previous call's whole input is never a
    # prefix, but the common prefix of two earlier calls is, from the third call on.
    bodies = [call(user("a"), {"role": "assistant", "content": "b"}, user(f"参考{i}")) for i in range(4)]
    shares = cache_shares(bodies)
    assert shares[1]["units"] == 0 < shares[1]["prefix"]
    assert shares[2]["units"] == pytest.approx(shares[2]["prefix"])
    summary = share_summary(shares)
    assert summary["calls"] == 2 and summary["prefix"]["min"] > 0.9


def test_the_stream_includes_tools_and_tool_turns() -> None:
    body = {"messages": [SYSTEM, user("hi"), {"role": "assistant", "content": "", "tool_calls": [{"id": "c1"}]},
                         {"role": "tool", "tool_call_id": "c1", "content": "{}"}],
            "tools": [{"type": "function", "function": {"name": "save_memory"}}]}
    stream = prompt_stream(body)
    assert stream.index("save_memory") < stream.index("<user>hi") < stream.index('"c1"') < stream.index("<id:c1>")


async def test_cost_reports_cache_shares_and_tool_costs() -> None:
    report = await run_cost(CostConfig(turns=12, tools=True), turns=["你要记住哦，我对花生过敏", "今天好累"])
    tools = report["tools"]
    assert tools["calls_offering_tools"] == 12 + 6 and tools["follow_up_calls"] == 6
    assert tools["follow_up_calls_per_turn"] == 0.5 and tools["tool_definition_tokens"] > 100
    assert report["cache"]["calls"] == 12 + 6 - 2 and report["cache"]["prefix"]["mean"] > 0.7


def test_shares_of_recorded_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = tmp_path / "requests.jsonl"
    bodies = [call(user("你好")), call(user("你好"), {"role": "assistant", "content": "嗨"}, user("累")),
              call(user("你好"), {"role": "assistant", "content": "嗨"}, user("累"), {"role": "assistant",
                                                                                  "content": "抱抱"}, user("嗯"))]
    recorded.write_text("".join(json.dumps(b, ensure_ascii=False) + "\n" for b in bodies), encoding="utf-8")
    assert cli.main(["cost", "--shares-of", str(recorded), "--json", str(tmp_path / "out.json")]) == 0
    assert "prefix shared with the previous call" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["calls"] == 1
