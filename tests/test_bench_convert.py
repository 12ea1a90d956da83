"""Converters on tiny synthetic inputs in each source format, plus a smoke test on the shared files."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench import cli
from bench.convert import ConvertStats, convert_dulemon, convert_kdconv, convert_locomo, convert_memdaily
from bench.convert.common import join_segmented
from bench.convert.distractors import DistractorPool, is_unrelated, synthetic_small_talk
from bench.convert.locomo import Mode, clean_dia_ids, parse_locomo_time
from bench.convert.memdaily import parse_memdaily_time
from bench.dataset import (
    DEFAULT_TZ,
    DatasetError,
    DatasetLine,
    MemoryLine,
    QueryLine,
    read_dataset,
    write_dataset,
)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "bench"


def _turn(dia_id: str, speaker: str, text: str, **extra: str) -> dict[str, str]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


def _locomo_sample() -> dict[str, Any]:
    return {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [_turn("D1:1", "Ann", "I adopted a cat."),
                          _turn("D1:2", "Bob", "Nice!", blip_caption="a photo of a cat"),
                          _turn("D1:3", "Ann", "Her name is Luna.")],
            "session_2_date_time": "9:05 am on 10 June, 2023",
            "session_2": [_turn("D2:1", "Bob", "How is Luna?"), _turn("D2:2", "Ann", "She is fine."),
                          _turn("D2:3", "Bob", "I start a new job tomorrow.")],
            "session_3_date_time": "9:00 am on 1 July, 2023",  # a date without turns, as in conv-26
        },
        "qa": [
            {"question": "What is the cat's name?", "answer": "Luna", "evidence": ["D1:03; D2:1"], "category": 4},
            {"question": "Who adopted a cat?", "answer": "Ann", "evidence": ["D1:1", "D9:9"], "category": 1},
            {"question": "What is Bob's cat?", "adversarial_answer": "none", "evidence": ["D1:1"], "category": 5},
            {"question": "Where?", "answer": "?", "evidence": ["D7:1"], "category": 3},
            {"question": "When does Bob start?", "answer": "11 June", "evidence": ["D2:3"], "category": 2},
        ],
        "observation": {
            # Grouped by speaker, Bob first: the converter must restore conversation order.
            "session_1_observation": {"Bob": [["Bob likes cats.", "D1:2"]],
                                      "Ann": [["Ann adopted a cat named Luna.", ["D1:1", "D1:3"]]]},
            "session_2_observation": {"Ann": [["Luna is doing fine.", "D2:1, D2:2"]]},
        },
    }


def _second_sample() -> dict[str, Any]:
    return {"sample_id": "conv-2",
            "conversation": {"speaker_a": "Cy", "speaker_b": "Di", "session_1_date_time": "10:00 am on 1 May, 2023",
                             "session_1": [_turn("D1:1", "Cy", "I play chess.")]},
            "qa": [{"question": "What does Cy play?", "answer": "chess", "evidence": ["D1:1"], "category": 4}],
            "observation": {}}


def _convert_locomo(tmp_path: Path, mode: Mode) -> tuple[list[DatasetLine], ConvertStats]:
    src = tmp_path / "locomo10.json"
    src.write_text(json.dumps([_locomo_sample(), _second_sample()]), encoding="utf-8")
    stats = ConvertStats()
    lines = list(stats.count(convert_locomo(src, mode, stats)))
    return lines, stats


def test_locomo_turns(tmp_path: Path) -> None:
    lines, stats = _convert_locomo(tmp_path, "turns")
    first = [line for line in lines if line.user == "conv-1"]
    assert [line.id for line in first] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3",
                                          "q0:cat4", "q1:cat1", "q4:cat2"]
    memory = first[1]
    assert isinstance(memory, MemoryLine)
    assert memory.text == "Bob: Nice! [shared a photo: a photo of a cat]"
    assert memory.time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    queries = [line for line in first if isinstance(line, QueryLine)]
    assert [q.relevant for q in queries] == [("D1:3", "D2:1"), ("D1:1",), ("D2:3",)]
    assert {q.time for q in queries} == {datetime(2023, 6, 10, 10, 5, tzinfo=UTC)}  # after session 2
    assert [line.user for line in lines[len(first):]] == ["conv-2", "conv-2"]
    assert stats.dropped == {"adversarial (category 5)": 1, "no valid evidence": 1}
    assert stats.notes["evidence ids dropped (malformed or nonexistent)"] == 2
    assert stats.notes["session dates without turns (skipped)"] == 1
    assert (stats.memories, stats.queries, len(stats.users)) == (7, 4, 2)


def test_locomo_observations(tmp_path: Path) -> None:
    lines, stats = _convert_locomo(tmp_path, "observations")
    first = [line for line in lines if line.user == "conv-1"]
    assert [line.id for line in first] == ["obs:D1:1#0", "obs:D1:2#0", "obs:D2:1#0", "q0:cat4", "q1:cat1"]
    queries = {line.id: line.relevant for line in first if isinstance(line, QueryLine)}
    assert queries == {"q0:cat4": ("obs:D1:1#0", "obs:D2:1#0"), "q1:cat1": ("obs:D1:1#0",)}
    assert stats.dropped["no observation extracted from its evidence"] == 2  # q4 here, conv-2's question
    assert first[2].time == datetime(2023, 6, 10, 9, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "expected", "dropped"),
    [(["D8:6; D9:17"], ["D8:6", "D9:17"], 0), (["D30:05"], ["D30:5"], 0), (["D:11:26"], [], 1),
     (["D1:18", "D", "D1:20"], ["D1:18", "D1:20"], 1), (["D9:1 D4:4,D4:4"], ["D9:1", "D4:4"], 0), ([], [], 0)],
)
def test_clean_dia_ids(raw: list[str], expected: list[str], dropped: int) -> None:
    known = {"D8:6", "D9:17", "D30:5", "D11:26", "D1:18", "D1:20", "D9:1", "D4:4"}
    assert clean_dia_ids(raw, known) == (expected, dropped)


def test_time_parsers() -> None:
    assert parse_locomo_time("12:09 am on 13 September, 2023").isoformat() == "2023-09-13T00:09:00+00:00"
    assert parse_memdaily_time("2024年04月01日 周一 08:39").isoformat() == "2024-04-01T08:39:00+08:00"
    with pytest.raises(ValueError):
        parse_memdaily_time("2024-04-01 08:39")


def _memdaily_trajectories() -> list[dict[str, Any]]:
    def message(mid: int, text: str, time: str) -> dict[str, Any]:
        return {"mid": mid, "message": text, "time": time, "place": "广东深圳"}

    return [
        {"tid": 0,
         "message_list": [message(0, "我将要参加金融科技论坛。", "2024年04月01日 周一 08:30"),
                          message(1, "金融科技论坛的地点是北京。", "2024年04月01日 周一 20:58"),
                          message(2, "中午吃了凉皮，分量挺足。", "2024年04月02日 周二 07:08")],
         "question_list": [{"qid": 0, "question": "金融科技论坛在哪里？", "answer": "北京",
                            "target_step_id": [1, 0], "choices": {}, "ground_truth": "A",
                            "time": "2024年04月03日 周三 09:00"}]},
        {"tid": 1,
         "message_list": [message(0, "我表弟身高169厘米。", "2024年04月02日 周二 10:00"),
                          message(1, "我表弟是北京人。", "2024年04月01日 周一 09:00")],  # out of time order
         "question_list": [{"qid": 0, "question": "我表弟多高？", "answer": "169", "target_step_id": [0],
                            "choices": "", "ground_truth": "A", "time": "2024年04月01日 周一 12:00"}]},
    ]


def _dulemon_sessions() -> list[dict[str, Any]]:
    return [
        {"bot_persona": ["B1: 我 喜欢 吃 火锅", "B2: 我 住 在 成都"],
         "user_said_persona": ["U1: 我 养 了 一 只 猫", "U2: 我 在 New York 读书"],
         "user_no_said_persona": ["U3: 我 父亲 是 警察"],
         "conversation": ["Usr: 你好 呀", "Bot:你好 ， 最近 怎么样", "Usr: 我 家 猫咪 又 调皮 了\tU1",
                          "Bot: 它 又 干 什么 了\tU1", "Usr: 打翻 了 水杯", "Bot: 我 最 爱 火锅 了\tB1",
                          "Usr: 好 啊", "Bot: 你 父亲 还 在 当 警察 吗\tU3"]},
        {"bot_persona": ["B1: 我 是 一 只 机器人"], "user_said_persona": ["U1: 我 喜欢 画画"],
         "user_no_said_persona": [],
         "conversation": ["Bot: 你好 ， 还 记得 我 吗\tB1", "Usr: 当然\tU1", "Bot: 最近 还 画画 吗\tU1"]},
    ]


def _write_sources(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "messages_and_QAs"
    folder.mkdir()
    (folder / "01_simple_test.json").write_text(json.dumps(_memdaily_trajectories(), ensure_ascii=False),
                                                encoding="utf-8")
    dulemon = tmp_path / "samples.json"
    dulemon.write_text("\n".join(json.dumps(s, ensure_ascii=False) for s in _dulemon_sessions()),
                       encoding="utf-8")
    return folder, dulemon


def test_dulemon(tmp_path: Path) -> None:
    _, src = _write_sources(tmp_path)
    stats = ConvertStats()
    lines = list(stats.count(convert_dulemon(src, stats)))
    assert [(line.user, line.id) for line in lines] == [
        ("dulemon:0", "0:U1"), ("dulemon:0", "0:U2"), ("dulemon:0", "0:B1"), ("dulemon:0", "0:B2"),
        ("dulemon:0", "0:t1"), ("dulemon:0", "0:t3"), ("dulemon:0", "0:t5"),
        ("dulemon:1", "1:U1"), ("dulemon:1", "1:B1"), ("dulemon:1", "1:t2")]
    assert lines[1].text == "我在New York读书"
    queries = [line for line in lines if isinstance(line, QueryLine)]
    assert [(q.text, q.relevant) for q in queries] == [
        ("你好呀", ()),  # the bot answered without a persona: a negative turn
        ("我家猫咪又调皮了", ("0:U1",)), ("打翻了水杯", ("0:B1",)), ("当然", ("1:U1",))]
    # The recent context the bot has at that moment: earlier user turns and its own last reply.
    assert [(q.context, q.reply) for q in queries] == [
        ((), None), (("你好呀",), "你好，最近怎么样"), (("你好呀", "我家猫咪又调皮了"), "它又干什么了"),
        ((), "你好，还记得我吗")]
    assert stats.dropped == {"tag names a persona the user never said": 1,
                             "no user utterance before the bot turn": 1}


def _convert_memdaily(folder: Path, dulemon: Path, min_candidates: int, seed: int = 7) -> list[DatasetLine]:
    stats = ConvertStats()
    return list(convert_memdaily(folder, stats, min_candidates=min_candidates, seed=seed, dulemon=dulemon))


def test_memdaily_messages_queries_and_distractors(tmp_path: Path) -> None:
    folder, dulemon = _write_sources(tmp_path)
    lines = _convert_memdaily(folder, dulemon, min_candidates=30)
    for tid, messages in ((0, ["0:0", "0:1", "0:2"]), (1, ["1:0", "1:1"])):
        scope = [line for line in lines if line.user == f"01_simple_test:{tid}"]
        assert isinstance(scope[-1], QueryLine) and not any(isinstance(x, QueryLine) for x in scope[:-1])
        assert len(scope) - 1 == 30
        assert [line.id for line in scope if not line.id.startswith("d:")][:-1] == messages  # order kept
        distractors = [line for line in scope if line.id.startswith("d:")]
        assert sorted(int(d.id[2:]) for d in distractors) == list(range(30 - len(messages)))
        assert all(d.time < scope[-1].time for d in distractors)
        assert len({d.text for d in distractors}) == len(distractors)
    query = lines[[line.id for line in lines].index("0:q0")]
    assert isinstance(query, QueryLine)
    assert query.relevant == ("0:1", "0:0")
    assert query.time == datetime(2024, 4, 3, 9, 0, tzinfo=DEFAULT_TZ)
    late = lines[-1]
    assert late.id == "1:q0" and late.time == datetime(2024, 4, 2, 10, 1, tzinfo=DEFAULT_TZ)  # moved


def test_memdaily_distractors_never_repeat_a_message_or_mention_its_subjects(tmp_path: Path) -> None:
    folder, dulemon = _write_sources(tmp_path)
    pool = DistractorPool(["中午吃了凉皮，分量挺足。", "我父亲是警察", "我养了一只猫"])
    # Use the whole pool but one sentence: a message equal to a pool sentence must be the one left out.
    lines = _convert_memdaily(folder, dulemon, min_candidates=len(pool.sentences) + 2)
    scope = [line for line in lines if line.user == "01_simple_test:0"]
    distractor_texts = [line.text for line in scope if line.id.startswith("d:")]
    assert "中午吃了凉皮，分量挺足。" not in distractor_texts
    assert "我养了一只猫" in distractor_texts  # DuLeMon sentences are used...
    assert not any("父亲" in text for text in distractor_texts)  # ...but not ones about MemDaily subjects


def test_memdaily_is_seeded_and_fails_when_the_pool_is_too_small(tmp_path: Path) -> None:
    folder, dulemon = _write_sources(tmp_path)
    assert _convert_memdaily(folder, dulemon, 40) == _convert_memdaily(folder, dulemon, 40)
    assert _convert_memdaily(folder, dulemon, 40) != _convert_memdaily(folder, dulemon, 40, seed=8)
    with pytest.raises(ValueError, match="pool only has"):
        _convert_memdaily(folder, dulemon, 100_000)


def test_synthetic_small_talk_is_varied_and_unrelated() -> None:
    talk = synthetic_small_talk()
    assert len(talk) == len(set(talk)) > 500
    assert all(is_unrelated(sentence) for sentence in talk)
    assert not is_unrelated("我表妹是中学的语文老师") and not is_unrelated("好的")
    assert random.Random(1).sample(talk, 3) == random.Random(1).sample(talk, 3)


def test_join_segmented_keeps_spaces_between_latin_words() -> None:
    assert join_segmented(" 我 在 IT 部门 工作 ， 在 New  York ") == "我在IT部门工作，在New York"


def test_cli_convert_writes_a_readable_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, dulemon = _write_sources(tmp_path)
    out = tmp_path / "out" / "memdaily.jsonl"
    argv = ["convert", "memdaily", str(folder), str(out), "--limit", "1", "--files", "01_*.json",
            "--min-candidates", "20", "--dulemon", str(dulemon)]
    assert cli.main(argv) == 0
    lines = list(read_dataset(out))
    assert len(lines) == 21 and {line.user for line in lines} == {"01_simple_test:0"}
    assert "20 memories, 1 queries, 1 users" in capsys.readouterr().err


def test_query_context_and_negative_turns_round_trip(tmp_path: Path) -> None:
    when = datetime(2024, 1, 1, 8, 0, tzinfo=DEFAULT_TZ)
    path = tmp_path / "d.jsonl"
    chat = QueryLine("u", "q2", when, "晚安", ())
    asked = QueryLine("u", "q1", when, "它又调皮了", ("m1",), ("我家猫咪",), "怎么啦")
    lines: list[DatasetLine] = [MemoryLine("u", "m1", when, "我养了一只猫"), asked, chat]
    write_dataset(path, lines)
    assert list(read_dataset(path)) == lines
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert "context" not in raw[2] and "reply" not in raw[2] and raw[2]["relevant"] == []
    assert chat.negative and not asked.negative


def test_read_dataset_reports_the_bad_line(tmp_path: Path) -> None:
    when = datetime(2024, 1, 1, 8, 0, tzinfo=DEFAULT_TZ)
    path = tmp_path / "d.jsonl"
    write_dataset(path, [MemoryLine("u", "m1", when, "你好", ("你好",), 60, "30d"),
                         QueryLine("u", "q1", when + timedelta(minutes=1), "问", ("m1",))])
    lines = list(read_dataset(path))
    assert lines[0] == MemoryLine("u", "m1", when, "你好", ("你好",), 60, "30d")
    naive = '{"kind": "memory", "user": "u", "id": "m2", "time": "2024-01-01T08:00:00", "text": "x"}'
    utc = '{"kind": "memory", "user": "u", "id": "m3", "time": "2024-01-01T00:00:00+00:00", "text": "x"}'
    path.write_text(naive + "\n" + utc + "\n", encoding="utf-8")
    parsed = [line.time for line in read_dataset(path)]
    assert parsed == [when, when] and parsed[1].utcoffset() == timedelta(0)
    for bad, message in [("{oops", "d.jsonl:2:"), ('{"kind": "memory", "user": "u", "id": "m3", "time": '
                                                   '"2024-01-01T08:00:00"}', "missing field 'text'"),
                         ('{"kind": "query", "user": "u", "id": "q", "time": "2024-01-01T08:00:00", '
                          '"text": "x", "relevant": ["m9"]}', "not earlier memories"),
                         ('{"kind": "query", "user": "u", "id": "q", "time": "2024-01-01T08:00:00", '
                          '"text": "x", "relevant": ["m2"], "context": "x"}', "'context' must be a list"),
                         ('{"kind": "query", "user": "u", "id": "q", "time": "2024-01-01T08:00:00", '
                          '"text": "x"}', "missing field 'relevant'")]:
        path.write_text(naive + "\n" + bad + "\n", encoding="utf-8")
        with pytest.raises(DatasetError, match=message):
            list(read_dataset(path))


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared benchmark files not present")
def test_smoke_on_the_shared_files(tmp_path: Path) -> None:
    samples = SHARED / "dulemon" / "samples.json"
    runs: dict[str, Callable[[ConvertStats], Iterator[DatasetLine]]] = {
        "turns": lambda stats: convert_locomo(SHARED / "locomo" / "locomo10.json", "turns", stats, limit=1),
        "observations": lambda stats: convert_locomo(SHARED / "locomo" / "locomo10.json", "observations",
                                                     stats, limit=1),
        "memdaily": lambda stats: convert_memdaily(SHARED / "memdaily" / "messages_and_QAs", stats, limit=1,
                                                   pattern="01_simple_events.json", dulemon=samples),
        "dulemon": lambda stats: convert_dulemon(samples, stats, limit=3),
    }
    for name, run in runs.items():
        stats = ConvertStats()
        out = tmp_path / f"{name}.jsonl"
        write_dataset(out, stats.count(run(stats)))
        lines = list(read_dataset(out))  # re-validates ids, order and relevance
        assert stats.queries > 0 and stats.memories > 0, name
        assert len(lines) == stats.memories + stats.queries
    assert stats.users == {"dulemon:0", "dulemon:1", "dulemon:2"}


def _kdconv_dialogue() -> dict[str, Any]:
    ticket = {"name": "恭王府", "attrname": "门票", "attrvalue": "40元"}
    info = {"name": "恭王府", "attrname": "Information", "attrvalue": "清代规模最大的一座王府"}
    return {"name": "恭王府", "messages": [
        {"message": "知道恭王府吗？"},
        {"message": "知道，是清代规模最大的一座王府。", "attrs": [info]},
        {"message": "那它的门票怎么收费？"},
        {"message": "门票40元。", "attrs": [ticket]},
        {"message": "好的，谢谢", "attrs": [ticket]},  # grounded after a grounded message: no query
    ]}


def test_kdconv_triples_become_memories_and_grounded_replies_queries(tmp_path: Path) -> None:
    for domain in ("film", "travel"):
        (tmp_path / "data" / domain).mkdir(parents=True)
        (tmp_path / "data" / domain / "test.json").write_text(
            json.dumps([_kdconv_dialogue()], ensure_ascii=False), encoding="utf-8")
    stats = ConvertStats()
    lines = list(convert_kdconv(tmp_path, stats, domains=["travel"]))
    memories = [line for line in lines if isinstance(line, MemoryLine)]
    queries = [line for line in lines if isinstance(line, QueryLine)]
    assert [m.text for m in memories] == ["恭王府：清代规模最大的一座王府", "恭王府的门票是40元"]
    assert [(q.text, q.relevant) for q in queries] == [
        ("知道恭王府吗？", ("kdconv-travel:0:k0",)), ("那它的门票怎么收费？", ("kdconv-travel:0:k1",))]
    # The window: the same speaker's earlier message and the other side's last one.
    assert queries[1].context == ("知道恭王府吗？",) and queries[1].reply == "知道，是清代规模最大的一座王府。"
    both = convert_kdconv(tmp_path, ConvertStats(), domains=["film", "travel"])
    assert {line.user for line in both} == {"kdconv-film:0", "kdconv-travel:0"}
    with pytest.raises(ValueError, match="cannot read"):
        list(convert_kdconv(tmp_path / "nowhere", ConvertStats()))
