"""Tiny runs of every benchmark, so ``make test`` notices when one of them stops working."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from bench import cli
from bench.botdriver import BotConfig
from bench.botload import run_bot_bench
from bench.cost import CostConfig, estimate_tokens, memory_parts, run_cost
from bench.dataset import MemoryLine, QueryLine, write_dataset
from bench.metrics import InjectionCounts
from bench.plots import draw_all
from bench.recall import run_engine
from bench.scale import NEW_USERS, ScaleConfig, run_scale
from bench.script_zh import SECOND_FACTS, SECOND_NEWS, SECOND_TURNS
from companion.chat.prompt import render_reference
from companion.core.models import Memory, MemoryType, Origin, Recalled, Validity
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore
from memory import EngineConfig, MemoryContext, MemoryEngine
from tests.pgtest import SERVER
from tests.redistest import SERVER as REDIS_URL
from tests.redistest import require_redis

WHEN = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


def _memories(user: str) -> list[MemoryLine]:
    texts = ["我的猫叫布丁，是一只三岁的橘猫", "今天晚饭吃了牛肉面，味道不错", "下个月要去北京出差一周",
             "最近在学弹吉他，手指好疼", "周末和朋友去爬了香山", "对花生过敏，小时候住过院"]
    return [MemoryLine(user, f"m{n}", WHEN + timedelta(minutes=n), text) for n, text in enumerate(texts)]


def test_recall_command_scores_engine_and_bm25(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    later = WHEN + timedelta(days=1)
    dataset = tmp_path / "tiny.jsonl"
    write_dataset(dataset, [
        *_memories("u1"), *_memories("u2"),
        QueryLine("u1", "q1", later, "布丁这只橘猫最近怎么样", ("m0",)),
        QueryLine("u1", "q2", later, "北京出差的事情定了吗", ("m2",)),
        QueryLine("u2", "q3", later, "我能吃花生酱吗", ("m5",)),
    ])
    out = tmp_path / "result.json"
    assert cli.main(["recall", str(dataset), "--k", "1,2,5", "--json", str(out)]) == 0
    assert "engine" in capsys.readouterr().out
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report) == {"queries", "engine", "bm25", "chars", "injection"} and report["queries"] == 3
    assert set(report["engine"]) == {"hit@1", "hit@2", "hit@5", "recall@1", "recall@2", "recall@5", "mrr",
                                     "latency_ms"}
    assert report["engine"]["hit@1"] == 1.0, "the engine missed an obviously relevant memory"
    assert report["engine"]["latency_ms"]["p50"] > 0


async def test_engine_runner_expands_merged_rows_and_keeps_scopes_apart() -> None:
    retold = "我的猫叫布丁，是一只三岁的橘猫"
    notes: Counter[str] = Counter()
    result = await run_engine([
        *_memories("u1"),
        MemoryLine("u1", "again", WHEN + timedelta(hours=1), retold),  # the engine merges a retold event
        MemoryLine("u2", "other", WHEN, "我的猫叫布丁，是一只三岁的橘猫"),
        QueryLine("u1", "q", WHEN + timedelta(days=1), "布丁是橘猫吗", ("again",)),
    ], (1, 2, 5), notes=notes)
    assert notes["memories merged into an earlier row"] == 1
    ranked = result.results[0].ranked_ids
    assert ranked[:2] == ("m0", "again"), "a merged row must stand for every dataset memory it absorbed"
    assert "other" not in ranked


async def test_scale_runs_tiny(tmp_path: Path) -> None:
    config = ScaleConfig(users=20, per_user=6, big_user=150, turns=40, writes=10, isolate=False)
    report = await run_scale(config, tmp_path)
    assert report["build"]["rows"] == 20 * 6 + 150 and report["build"]["tables"] == 21
    assert report["rows"]["memories"] == 20 * 6 + 150 and report["rows"]["users"] == 20
    for key in ("recall_typical", "recall_big"):
        assert report[key]["warm"]["n"] > 0 and report[key]["warm"]["p95"] > 0
        assert report[key]["cold"]["n"] >= 1
    assert report["write_big"]["n"] == 10
    assert report["write_new_user"]["n"] == NEW_USERS and report["write_new_user"]["p50"] > 0
    assert report["write_new_user"]["took_spare"] == NEW_USERS  # 50 ms apart: every one finds a spare
    assert report["write_new_user_burst"]["n"] == NEW_USERS
    assert report["startup"]["seconds"] > 0 and report["startup"]["active_scopes"] == 20
    decay, backup = report["decay"], report["backup"]
    assert decay["scopes"] == 21 + 2 * NEW_USERS and decay["decayed"] > 0 and decay["seconds"] > 0
    assert decay["during"]["turn_ms"]["n"] >= 1 and decay["during"]["remember_ms"]["n"] >= 1
    assert decay["plain"]["tables"] == 21 + 2 * NEW_USERS and decay["plain"]["decayed"] > 0 and decay["plain_ratio"] > 0
    assert backup["files"] == 21 + 2 * NEW_USERS and backup["rows"] > 0 and backup["seconds"] > 0
    assert backup["plain"]["files"] == backup["files"] and backup["plain_ratio"] > 0
    assert len(report["build"]["seconds_per_slice"]) == 10
    assert report["size"]["db_mb"] + report["size"]["wal_mb"] > 0 and report["rss_mb_peak"] > 0
    assert report["forget_typical"]["n"] == 50 and report["forget_big"]["n"] == 50


def keys(report: dict[str, Any], prefix: str = "") -> set[str]:
    found = set()
    for key, value in report.items():
        found.add(prefix + key)
        if isinstance(value, dict) and key not in ("config", "plain"):
            found |= keys(value, f"{prefix}{key}.")
    return found


@pytest.mark.postgresql
async def test_scale_on_postgresql_gives_the_same_keys(tmp_path: Path) -> None:
    config = ScaleConfig(users=10, per_user=6, big_user=80, turns=20, writes=5, forgets=5, isolate=False)
    sqlite = await run_scale(config, tmp_path / "sqlite")
    pg = await run_scale(replace(config, database_url=SERVER), tmp_path / "pg")
    assert keys(pg) == keys(sqlite)
    assert pg["build"]["rows"] == 10 * 6 + 80 and pg["startup"]["active_scopes"] == 10
    assert pg["recall_big"]["warm"]["p95"] > 0 and pg["forget_big"]["n"] == 5 and pg["size"]["db_mb"] > 0
    assert pg["decay"]["scopes"] == 11 + 2 * NEW_USERS and pg["decay"]["decayed"] > 0
    assert pg["write_new_user"]["took_spare"] is None and pg["backup"]["snapshot_s"] is None
    assert pg["backup"]["files"] == sqlite["backup"]["files"] and pg["backup"]["seconds"] > 0


async def test_bot_answers_every_message_exactly_once() -> None:
    report = await run_bot_bench(BotConfig(users=5, messages=3, answer_timeout=30))
    assert report["answered"] == 15 and report["missing"] == 0
    assert report["exactly_one_answer_each"], report
    assert report["llm_calls_final"]["reply"] == 15
    assert report["llm_requests_final"]["reply"] == 15, "the fake LLM saw a different number of replies"
    assert report["messages_per_s"] > 0


@pytest.mark.parametrize("bot", ["plain", "echo"])
async def test_baselines_answer_every_message_exactly_once(bot: str) -> None:
    report = await run_bot_bench(BotConfig(users=4, messages=3, answer_timeout=30), bot=bot)
    assert report["bot"] == bot and report["answered"] == 12 and report["exactly_one_answer_each"], report
    # The plain bot asks the model once per message (through the SDK, as the companion does), each user's
    # opening /start_aiGF too; the echo bot never.
    asked = 4 * (3 + 1) if bot == "plain" else 0
    assert report["llm_calls_final"].get("reply", 0) == asked
    assert report["llm_requests_final"].get("reply", 0) == asked


async def test_cost_counts_match_what_the_fake_model_saw() -> None:
    report = await run_cost(CostConfig(turns=30))
    client, server = report["client_usage"]["calls"], report["server_requests"]
    assert client == {purpose: n for purpose, n in server.items() if n}
    assert client["reply"] == 30
    assert client["extraction"] >= 1, "turn 21 tells of a fever: extraction must run at once"
    per100 = report["per_100_turns"]
    assert per100["reply"]["calls"] == 100.0
    assert report["non_reply_calls_per_100_turns"] == pytest.approx(
        (client.get("extraction", 0) + client.get("profile", 0)) * 100 / 30, abs=0.1)
    assert per100["reply"]["prompt_chars"] * 30 / 100 == pytest.approx(report["client_usage"]["prompt_chars"]["reply"])
    assert len(report["context_tokens_per_turn"]) == 30
    assert report["memories_stored"] >= 1


async def test_second_facts_on_known_topics_are_learned_in_the_turn_that_tells_them() -> None:
    report = await run_cost(CostConfig(turns=len(SECOND_TURNS)), SECOND_TURNS, SECOND_FACTS, news=SECOND_NEWS)
    learning = report["learning"]
    assert learning["never"] == []
    assert {t: learning["news"][t] for t in ("虾也过敏", "豆豆", "银行")} == {"虾也过敏": 0, "豆豆": 0, "银行": 0}
    assert learning["lags"]["花生过敏"] == 0


def test_memory_parts_are_read_from_the_real_reference_block() -> None:
    # Rendering needs no database: the engine is built around a storage it never touches here.
    engine = MemoryEngine(cast(SQLiteStore, None), KeywordExtractor(), EngineConfig())
    memory = Memory(1, "2024-03-01 感冒发烧", ["感冒"], 80, WHEN, Validity.DAYS_30, None, WHEN, None,
                    MemoryType.EVENT, Origin.EXTRACTED, 0, WHEN)
    context = MemoryContext(core="喜欢奶茶", dynamic=["最近在准备面试"],
                            recalled=[Recalled(memory=memory, score=1.0, match=1.0)])
    parts = memory_parts(render_reference(context, WHEN, engine.config.tz))
    assert parts["core"] == '"喜欢奶茶"'
    assert "最近在准备面试" in parts["dynamic"] and "感冒" not in parts["dynamic"]
    assert parts["recalled"].endswith('- "2024-03-01 感冒发烧"\n')
    empty = memory_parts(render_reference(MemoryContext(), WHEN, engine.config.tz))
    assert empty == {"core": "", "dynamic": "", "recalled": ""}
    assert estimate_tokens("你好") == 2 and estimate_tokens("hello") == 2


def test_plots_draw_from_results(tmp_path: Path) -> None:
    summary = {"hit@1": 0.5, "hit@2": 0.6, "recall@5": 0.7, "recall@10": 0.8, "mrr": 0.6,
               "latency_ms": {"p50": 1.0, "p95": 2.0}}
    (tmp_path / "recall_tiny.json").write_text(json.dumps({"queries": 3, "engine": summary, "bm25": summary}))
    drawn = draw_all(tmp_path)
    assert drawn == [tmp_path / "recall_quality.png"] and drawn[0].stat().st_size > 1000


async def test_engine_runner_counts_false_injections() -> None:
    later = WHEN + timedelta(days=1)
    injections = InjectionCounts()
    await run_engine([
        *_memories("u1"),
        MemoryLine("u3", "x", WHEN, "我在准备考研，每天去图书馆"),
        QueryLine("u1", "q1", later, "布丁这只橘猫最近怎么样", ("m0",)),
        QueryLine("u1", "chat", later, "哈哈哈你说得对", ()),  # a negative turn: nothing is relevant
        QueryLine("u3", "q3", later, "考研准备得怎么样了", ("x",)),
    ], (1, 2), injections=injections)
    summary = injections.summary()
    assert summary["gated hit"] == 1.0
    assert summary["false injection, negative"] == 0.0 and summary["negative turns"] == 1
    # Each question is also asked of another user's memories: two positive questions, two such turns.
    assert summary["other user turns"] == 2 and summary["false injection, other user"] == 0.0


def test_recall_latency_command_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "latency.json"
    assert cli.main(["recall-latency", "--sizes", "5,20", "--turns", "5", "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["sizes"]) == {"5", "20"} and report["sizes"]["20"]["p95"] > 0
    assert "20 memories" in capsys.readouterr().out
    assert report["sizes"]["20"]["cpu"]["n"] == 5


def test_vector_search_command_runs_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vectors.json"
    assert cli.main(["vector-search", "--sizes", "3,300", "--dim", "8", "--searches", "3", "--encode", "4",
                     "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert set(report["sizes"]) == {"3", "300"} and report["sizes"]["300"]["scorers"]["numpy"]["n"] == 3
    assert report["sizes"]["300"]["bytes_per_vector"] >= 8 * 4  # eight float32 and the row around them
    shown = capsys.readouterr().out
    assert "300 vectors, numpy" in shown
    if report["encode"] is not None:  # the in-process model where its wheel installs
        assert report["encode"]["memories"] == 4 and report["encode"]["cpu_ms_per_memory"] > 0
        assert "hours on one core" in shown


def test_dida_bench_counts_requests_and_projects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "dida.json"
    assert cli.main(["dida", "--users", "2", "--memories", "6", "--project-users", "10", "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["first_push_requests_per_user"] == 6 + 9  # the cards, and token, project, columns, read-back
    assert report["poll_requests_per_user"] == 2 and report["cards_per_account"] == 6 + 1
    assert report["projection"]["poll_round_requests"] == 20
    assert "first push" in capsys.readouterr().out


def test_the_queue_bench_runs_through_the_bench_cli(capsys: pytest.CaptureFixture[str]) -> None:
    """The server benchmarks are subcommands of ``python -m bench``; the queue one, small, against real Redis."""
    require_redis()
    assert cli.main(["queue", "--updates", "200", "--chats", "20", "--redis", REDIS_URL]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["handled"] == 200 and report["updates"] == 200


def test_followups_bench_runs_tiny_and_finds_what_the_plain_scan_finds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "followups.json"
    assert cli.main(["followups", "--users", "30", "--per-user", "40", "--rounds", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["round_s"]["median"] > 0 and len(report["due_per_round"]) == 2
    # The round writes to one user each at most; the scan counts every open thread of every user.
    assert 0 < report["due_per_round"][0] <= 30 and report["plain_due"] >= report["due_per_round"][0]
    assert "a round before its model calls" in capsys.readouterr().out
