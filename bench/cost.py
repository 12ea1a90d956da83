"""``python -m bench cost``: LLM calls and prompt sizes of a scripted conversation through the real
pipeline (ChatService, engine, openai client) against a counting fake model.

The conversation runs on a simulated clock (3 minutes per turn, so 200 turns are a 10-hour day and
the profile's TTL and minimum refresh interval behave as in real use). Background extraction and
profile work is awaited after every turn: three minutes is far longer than either takes.

Tokens are estimated with DeepSeek's published ratio (api-docs.deepseek.com, "Token & Token Usage"):
one Chinese character ~ 0.6 token, one other character ~ 0.3 token. The prompt-cache shares of the reply
calls are computed by ``bench.cache``; ``--requests`` saves the request bodies, and ``python -m bench
cost --shares-of FILE`` computes the shares of bodies recorded elsewhere (an older version of the bot).
"""

from __future__ import annotations

import json
import random
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.brain import ScriptedModel
from bench.cache import cache_shares, estimate_tokens, prompt_stream, share_summary
from bench.script_zh import FACTS, TURNS
from bench.timing import latency_summary
from companion.chat.pipeline import ChatService
from companion.chat.types import ChatConfig
from companion.config.settings import Settings
from companion.core.models import Scope
from companion.core.usage import UsageTotals
from companion.engine.tools import memory_tools
from companion.llm.client import LLMClient
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine
from tests.fakes import FakeLLM
from tests.fakes.llm import is_json_mode
from tests.scripted import EXTRACT_MARK, PROFILE_MARK, REFERENCE_CLOSE, reference_data

START = datetime(2025, 6, 2, 0, 0, tzinfo=UTC)  # 08:00 in Asia/Shanghai
PURPOSES = ("reply", "extraction", "profile")
MEMORY_PARTS = ("core", "dynamic", "recalled")
TARGETS = {"non_reply_calls_per_100_turns": 12, "memory_context_tokens_per_reply": 300,
           "cache_prefix_share_from_turn_3": 0.7}
# The reference block's memory parts (prompts/context.md): the profile line, then the optional sections.
PROFILE_HEADER = "关于用户（长期了解）："
NO_PROFILE = "（还不太了解）"
DYNAMIC_HEADER = "用户最近的情况（和当前话题有关）：\n"
MEMORY_HEADER = "可能相关的记忆（仅供参考）：\n"

__all__ = ["estimate_tokens"]


@dataclass(frozen=True, slots=True)
class CostConfig:
    turns: int = 200
    minutes_per_turn: float = 3.0
    seed: int = 7
    tools: bool = False  # offer the real memory tools (companion/engine/tools.py)


class SimClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


def purpose_of(body: Mapping[str, Any]) -> str:
    if not is_json_mode(dict(body)):
        return "reply"
    text = str(body["messages"][-1]["content"])
    return "profile" if PROFILE_MARK in text else "extraction" if EXTRACT_MARK in text else "other"


def memory_parts(reference: str) -> dict[str, str]:
    """The parts of a reply call's reference block that come from memory: the profile core (unless it is
    the "not known yet" placeholder), the matching dynamic traits and the recalled memories, each with
    its header line."""
    section = reference.split(PROFILE_HEADER, 1)[-1].split(REFERENCE_CLOSE, 1)[0]
    core, _, blocks = section.partition("\n")
    dynamic, memories = "", ""
    if MEMORY_HEADER in blocks:
        blocks, _, rest = blocks.partition(MEMORY_HEADER)
        memories = MEMORY_HEADER + rest
    if DYNAMIC_HEADER in blocks:
        dynamic = blocks
    return {"core": "" if core == NO_PROFILE else core, "dynamic": dynamic, "recalled": memories}


async def run_cost(config: CostConfig, turns: Sequence[str] = TURNS,
                   facts: Mapping[str, dict[str, Any]] = FACTS,
                   record: list[dict[str, Any]] | None = None, news: Sequence[str] = ()) -> dict[str, Any]:
    """Play the script; ``record``, when given, receives every request body the fake model saw; ``news``: the
    triggers of ``facts`` that must be learned in the turn that tells them (reported apart)."""
    script = [turns[n % len(turns)] for n in range(config.turns)]
    async with FakeLLM() as fake:
        model = ScriptedModel(facts, record=True)
        model.install(fake)
        with tempfile.TemporaryDirectory(prefix="bench-cost-") as tmp:
            settings = Settings(_env_file=None, data_dir=Path(tmp))  # type: ignore[call-arg]
            usage = UsageTotals()
            llm = LLMClient(api_key="sk-bench", base_url=fake.base_url,
                            model="deepseek-chat", max_retries=0, usage_sink=usage)
            engine = await open_engine(settings, KeywordExtractor(), llm)
            try:
                replies, learned = await _converse(engine, llm, settings, config, script, facts)
                stored = len(await engine.memories(Scope(1)))
            finally:
                await engine.close()
                await llm.close()
        if record is not None:
            record.extend(fake.requests)
        report = _report(config, fake.requests, model.answers, usage, replies, stored)
        report["learning"] = learning_lags(script, facts, learned, news)
        return report


def learning_lags(script: Sequence[str], facts: Mapping[str, dict[str, Any]], learned: Mapping[str, int],
                  news: Sequence[str]) -> dict[str, Any]:
    """Turns from the telling of each fact (the first turn holding its trigger) to the turn after which it was
    stored (0: learned in the turn that told it); None: never learned."""
    lags: dict[str, int | None] = {}
    for trigger in facts:
        told = next((n for n, text in enumerate(script) if trigger in text), None)
        if told is not None:
            lags[trigger] = learned[trigger] - told if trigger in learned else None
    known = [lag for lag in lags.values() if lag is not None]
    return {"lags": lags, "never": sorted(t for t, lag in lags.items() if lag is None),
            "mean_lag": round(sum(known) / len(known), 1) if known else None,
            "news": {t: lags.get(t) for t in news}}


async def _converse(engine: MemoryEngine, llm: LLMClient, settings: Settings, config: CostConfig,
                    script: Sequence[str], facts: Mapping[str, dict[str, Any]],
                    ) -> tuple[list[tuple[int, int]], dict[str, int]]:
    """Plays the script; returns (memories recalled, memories mentioned) per turn, and the turn after which
    each fact (by trigger) was first stored."""
    clock = SimClock(START)
    chat = ChatService(engine, llm, ChatConfig.from_settings(settings), clock=clock,
                       rng=random.Random(config.seed),
                       tools=memory_tools(engine, clock=clock) if config.tools else None)
    scope = Scope(1)
    await chat.start(scope)
    out: list[tuple[int, int]] = []
    learned: dict[str, int] = {}
    for text in script:
        clock.advance(timedelta(minutes=config.minutes_per_turn))
        reply = await chat.reply(scope, text)
        if not reply.ok:
            raise RuntimeError(f"the fake model failed a reply: {reply.text}")
        await chat.drain()
        out.append((len(reply.recalled), len(reply.mentioned)))
        stored = await engine.memories(scope)
        for trigger, fact in facts.items():
            if trigger not in learned and any(set(fact["keywords"]) <= set(m.keywords) for m in stored):
                learned[trigger] = len(out) - 1
    return out, learned


def _report(config: CostConfig, requests: Sequence[Mapping[str, Any]], answers: Sequence[tuple[str, str]],
            usage: UsageTotals, replies: Sequence[tuple[int, int]], stored: int) -> dict[str, Any]:
    per100 = 100 / config.turns
    sizes: dict[str, Counter[str]] = {p: Counter() for p in PURPOSES}
    context_tokens: list[float] = []
    parts: Counter[str] = Counter()
    for body in requests:
        purpose = purpose_of(body)
        prompt = "".join(str(m.get("content", "")) for m in body["messages"])
        sizes.setdefault(purpose, Counter()).update(
            {"calls": 1, "prompt_chars": len(prompt), "prompt_tokens_est": estimate_tokens(prompt)})
        if purpose == "reply":
            found = memory_parts(reference_data(dict(body)))
            parts.update({name: estimate_tokens(text) for name, text in found.items()})
            context_tokens.append(sum(estimate_tokens(text) for text in found.values()))
    for purpose, text in answers:
        sizes[purpose].update({"completion_chars": len(text), "completion_tokens_est": estimate_tokens(text)})
    per_purpose = {p: {k: round(v * per100, 1) for k, v in sorted(c.items())} for p, c in sizes.items()}
    reply_bodies = [body for body in requests if purpose_of(body) == "reply"]
    shares = cache_shares(reply_bodies)
    non_reply = sum(c["calls"] for p, c in sizes.items() if p != "reply") * per100
    replies_n = max(len(context_tokens), 1)
    return {
        "config": asdict(config), "targets": TARGETS, "per_100_turns": per_purpose,
        "non_reply_calls_per_100_turns": round(non_reply, 1),
        "memory_context_tokens": {**latency_summary(context_tokens), "max": max(context_tokens, default=0),
                                  "mean": round(sum(context_tokens) / replies_n, 1)},
        "memory_context_parts_mean_tokens": {k: round(parts[k] / replies_n, 1) for k in MEMORY_PARTS},
        "context_tokens_per_turn": context_tokens,
        "turns_with_recall": sum(1 for recalled, _ in replies if recalled),
        "recalled_memories_mentioned": sum(mentioned for _, mentioned in replies),
        "memories_stored": stored,
        "client_usage": {"calls": usage.calls(),
                         "prompt_chars": {p: t.prompt_chars for p, t in usage.by_purpose().items()},
                         "completion_chars": {p: t.completion_chars for p, t in usage.by_purpose().items()}},
        "server_requests": {p: sizes[p]["calls"] for p in sizes},
        "cache": share_summary(shares),
        "cache_per_call": [{k: round(v, 3) for k, v in share.items()} for share in shares],
        "tools": tool_costs(reply_bodies),
    }


def tool_costs(replies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reply calls that offered tools, and the follow-up rounds tools caused (a reply call whose last
    message is a tool result), with their estimated prompt tokens."""
    follow_ups = [body for body in replies if body["messages"][-1].get("role") == "tool"]
    first_rounds = len(replies) - len(follow_ups)
    offered = [body for body in replies if body.get("tools")]
    return {
        "tool_definition_tokens": estimate_tokens(json.dumps(offered[0]["tools"], ensure_ascii=False))
        if offered else 0,
        "calls_offering_tools": sum(1 for body in replies if body.get("tools")),
        "turns": first_rounds,
        "follow_up_calls": len(follow_ups),
        "follow_up_calls_per_turn": round(len(follow_ups) / first_rounds, 3) if first_rounds else 0.0,
        # History keeps only words, so a request's tool-calling answers are all of this turn: the first
        # follow-up of a turn carries exactly one.
        "turns_with_tool_call": sum(1 for body in follow_ups if _tool_rounds(body) == 1),
        "follow_up_prompt_tokens": sum(estimate_tokens(prompt_stream(body)) for body in follow_ups),
    }


def _tool_rounds(body: Mapping[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m.get("role") == "assistant" and m.get("tool_calls"))


def format_cost(report: dict[str, Any]) -> str:
    header = f"  {'purpose':<12}{'calls':>8}{'prompt chars':>14}{'prompt tok~':>13}{'compl chars':>13}"
    lines = [f"{report['config']['turns']} user turns, per 100 turns:", f"{header}{'compl tok~':>12}"]
    for purpose, row in report["per_100_turns"].items():
        lines.append(f"  {purpose:<12}{row.get('calls', 0):>8}{row.get('prompt_chars', 0):>14}"
                     f"{row.get('prompt_tokens_est', 0):>13}{row.get('completion_chars', 0):>13}"
                     f"{row.get('completion_tokens_est', 0):>12}")
    ctx, parts = report["memory_context_tokens"], report["memory_context_parts_mean_tokens"]
    lines += [
        f"non-reply calls per 100 turns: {report['non_reply_calls_per_100_turns']} (target <= 12)",
        f"memory context per reply call, est. tokens: mean {ctx['mean']}, p50 {ctx['p50']}, p95 {ctx['p95']}, "
        f"max {ctx['max']} (target <= 300); mean parts: core {parts['core']}, dynamic {parts['dynamic']}, "
        f"recalled {parts['recalled']}",
        f"turns with recalled memories: {report['turns_with_recall']}, mentioned in the reply: "
        f"{report['recalled_memories_mentioned']}; memories stored at the end: {report['memories_stored']}",
        *format_cache(report["cache"]),
        f"tools: offered on {report['tools']['calls_offering_tools']} reply calls "
        f"({report['tools']['tool_definition_tokens']} tokens~ of definitions); follow-up calls "
        f"{report['tools']['follow_up_calls']} ({report['tools']['follow_up_calls_per_turn']} per turn, "
        f"{report['tools']['follow_up_prompt_tokens']} prompt tokens~ in all); turns with a tool call: "
        f"{report['tools']['turns_with_tool_call']} of {report['tools']['turns']}",
    ]
    learning = report.get("learning")
    if learning:
        lags = ", ".join(f"{t} {'never' if lag is None else lag}" for t, lag in learning["lags"].items())
        lines.append(f"turns from telling to learning (0: the same turn): mean {learning['mean_lag']}; {lags}")
        if learning["news"]:
            news = ", ".join(f"{t} {'never' if lag is None else lag}" for t, lag in learning["news"].items())
            lines.append(f"second facts on known topics, learned after (turns): {news}")
    return "\n".join(lines)


def shares_of(bodies: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Cache shares of recorded request bodies (one user's conversation, JSON lines of any bot version)."""
    return share_summary(cache_shares([body for body in bodies if purpose_of(body) == "reply"]))


def format_cache(summary: Mapping[str, Any]) -> list[str]:
    if not summary.get("calls"):
        return ["prompt cache: fewer than 3 reply calls"]
    lines = [f"prompt cache, reply calls from the 3rd on ({summary['calls']} calls, "
             f"mean {summary['prompt_tokens_mean']} prompt tokens~):"]
    for key, label in (("prefix", "prefix shared with the previous call"),
                       ("units", "DeepSeek unit rule estimate")):
        row = summary[key]
        lines.append(f"  {label}: weighted {row['weighted']:.1%}, mean {row['mean']:.1%}, "
                     f"p10 {row['p10']:.1%}, min {row['min']:.1%} (target >= 70%)")
    return lines
