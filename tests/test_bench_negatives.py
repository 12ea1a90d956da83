"""Negatives that are negatives by the data set's own annotations, not by the engine (issue 10, third pass):
DuLeMon's user-turn persona tags (``about``) and MemDaily's schema subjects (``subjects``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bench.convert import ConvertStats, convert_dulemon, convert_memdaily
from bench.convert.subjects import Schema
from bench.dataset import DEFAULT_TZ, DatasetLine, MemoryLine, QueryLine, read_dataset, write_dataset
from bench.metrics import CHAT_CLEAN, OTHER_CLEAN, InjectionCounts
from bench.recall import run_engine, shares_subject

WHEN = datetime(2024, 1, 1, 8, 0, tzinfo=DEFAULT_TZ)

SCHEMA_CSV = """\ufeff属性名,范围
姓名,"['王强', '李娟']"
年龄,None
教育背景,"['本科', '硕士']"
亲属关系,"['父亲', '母亲', '表妹']"
同事关系,"['上司', '同事']"
物品类型,"['手机', '运动鞋']"
手机,"['苹果iPhone 13', '华为P50']"
运动鞋,"['亚瑟士Gel-Kayano 26']"
地点类型,"['小区']"
小区,"['绿洲家园']"
"""


@pytest.fixture
def schema(tmp_path: Path) -> Schema:
    path = tmp_path / "meta_profile.csv"
    path.write_text(SCHEMA_CSV, encoding="utf-8")
    return Schema.read(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我表妹学历是硕士。", {"relation:表妹"}),
        ("李婷婷是我的表妹，其身高是164cm。", {"relation:表妹"}),
        ("我妈妈今年61岁了。", {"relation:母亲"}),  # what people call 母亲
        ("我上司的邮箱地址是x@y.com。", {"relation:上司"}),  # 地址 is no event attribute
        ("苹果的iPhone13真心好用。", {"kind:手机"}),  # a named value stands for its kind
        ("我穿的运动鞋是亚瑟士Gel-Kayano26。", {"kind:运动鞋"}),
        ("我住的那个小区叫绿洲家园。", {"kind:小区"}),
        ("金融科技精英论坛的地点是北京。", {"event:金融科技精英论坛"}),
        ("我将要参加的模型艺术盛宴，它的规模是九百人。", {"event:模型艺术盛宴"}),
        ("我将要参加趣跑购物节。", {"event:趣跑购物节"}),
        ("傍晚做了个奇怪的梦，醒来还记得一半。", set()),
        ("王强喜欢本科的课。", set()),  # names and attribute values are not subjects
    ],
)
def test_schema_subjects(schema: Schema, text: str, expected: set[str]) -> None:
    assert schema.subjects(text) == expected


def test_question_subjects_come_from_its_gold_messages(schema: Schema) -> None:
    gold = ["我叔叔今年61岁了。", "我表妹在广州工作呢。", "我将要参加趣跑购物节。"]
    assert schema.of_question(gold) == {"relation:表妹", "event:趣跑购物节"}


@pytest.mark.parametrize(
    ("asked", "there", "annotated", "expected"),
    [
        ({"relation:表妹"}, {"relation:表妹", "kind:手机"}, True, True),  # the other persona has a 表妹 too
        ({"relation:表妹"}, {"relation:上司"}, True, False),
        ({"event:趣跑购物节"}, {"event:模型艺术盛宴"}, True, False),
        (set(), {"relation:上司"}, True, True),  # an annotated set found no subject: not certified
        (set(), set(), False, False),  # a set without subjects: every other-user turn counts
    ],
)
def test_shares_subject(asked: set[str], there: set[str], annotated: bool, expected: bool) -> None:
    assert shares_subject(asked, there, annotated) is expected


def _sessions() -> list[dict[str, object]]:
    return [{
        "bot_persona": ["B1: 我 喜欢 吃 火锅"],
        "user_said_persona": ["U1: 我 上 三 年级", "U2: 我 养 了 一 只 猫"],
        "user_no_said_persona": ["U3: 我 是 男生"],
        "conversation": ["Usr: 你好 呀", "Bot: 你好",  # chit-chat, untagged
                         "Usr: 什么 嘛 ， 我 都 三 年级 了\tU1", "Bot: 哈哈 对 哦",  # states stored U1
                         "Usr: 我 可是 男生\tU3", "Bot: 好 吧",  # states U3, never stored
                         "Usr: 猫 呢\tU1,U2", "Bot: 睡觉 呢"],  # two tags
    }]


@pytest.mark.parametrize(
    ("text", "about"),
    [("你好呀", ()), ("什么嘛，我都三年级了", ("0:U1",)), ("我可是男生", ()), ("猫呢", ("0:U1", "0:U2"))],
)
def test_dulemon_chit_chat_stating_a_stored_persona_is_about_it(tmp_path: Path, text: str,
                                                                about: tuple[str, ...]) -> None:
    src = tmp_path / "samples.json"
    src.write_text("\n".join(json.dumps(s, ensure_ascii=False) for s in _sessions()), encoding="utf-8")
    stats = ConvertStats()
    negatives = {line.text: line for line in convert_dulemon(src, stats)
                 if isinstance(line, QueryLine) and line.negative}
    assert negatives[text].about == about
    assert stats.notes["chit-chat turns stating a stored persona (about)"] == 2


def test_memdaily_lines_carry_subjects_when_the_schema_is_beside_them(tmp_path: Path) -> None:
    folder = tmp_path / "messages_and_QAs"
    folder.mkdir()
    (tmp_path / "meta_profile.csv").write_text(SCHEMA_CSV, encoding="utf-8")
    trajectory = {"tid": 0, "message_list": [
        {"mid": 0, "message": "我表妹学历是硕士。", "time": "2024年04月01日 周一 08:39", "place": "x"},
        {"mid": 1, "message": "我将要参加趣跑购物节。", "time": "2024年04月01日 周一 09:39", "place": "x"}],
        "question_list": [{"qid": 0, "question": "那个硕士学历的人是谁？", "answer": "表妹", "target_step_id": [0],
                           "choices": {}, "ground_truth": "A", "time": "2024年04月02日 周二 08:00"}]}
    (folder / "01_simple_roles.json").write_text(json.dumps([trajectory], ensure_ascii=False), encoding="utf-8")
    stats = ConvertStats()
    lines = list(convert_memdaily(folder, stats, min_candidates=2))
    memories = [line for line in lines if isinstance(line, MemoryLine)]
    query = next(line for line in lines if isinstance(line, QueryLine))
    assert [m.subjects for m in memories] == [("relation:表妹",), ("event:趣跑购物节",)]
    assert query.subjects == ("relation:表妹",)


def test_about_and_subjects_round_trip_and_stay_optional(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines: list[DatasetLine] = [
        MemoryLine("u", "m1", WHEN, "我表妹学历是硕士", subjects=("relation:表妹",)),
        MemoryLine("u", "m2", WHEN, "我上三年级"),
        QueryLine("u", "q1", WHEN, "我表妹呢", ("m1",), subjects=("relation:表妹",)),
        QueryLine("u", "q2", WHEN, "我都三年级了", (), about=("m2",)),
    ]
    write_dataset(path, lines)
    assert list(read_dataset(path)) == lines
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert "subjects" not in raw[1] and "about" not in raw[2] and "subjects" not in raw[3]


def test_clean_kinds_are_reported_apart_and_pooled() -> None:
    counts = InjectionCounts()
    counts.add("negative", ["m1"], ())
    counts.add("negative", [], ())
    counts.add(CHAT_CLEAN, [], ())
    for injected in (["r1"], [], [], []):
        counts.add("other user", injected, ())
    counts.add(OTHER_CLEAN, ["r1"], ())
    counts.add(OTHER_CLEAN, [], ())
    summary = counts.summary()
    assert summary["false injection"] == round(2 / 6, 4)  # the old pooled rate is unchanged
    assert summary[f"false injection, {CHAT_CLEAN}"] == 0.0 and summary[f"{CHAT_CLEAN} turns"] == 1
    assert summary[f"false injection, {OTHER_CLEAN}"] == 0.5 and summary[f"{OTHER_CLEAN} turns"] == 2
    assert summary["false injection, clean"] == round(1 / 3, 4)


async def test_replay_counts_only_certified_negatives_as_clean() -> None:
    later = WHEN + timedelta(days=1)
    lines: list[DatasetLine] = [
        MemoryLine("a", "a1", WHEN, "我表妹学历是硕士", subjects=("relation:表妹",)),
        MemoryLine("b", "b1", WHEN, "我表妹在广州工作", subjects=("relation:表妹",)),
        MemoryLine("c", "c1", WHEN, "我上司喜欢钓鱼", subjects=("relation:上司",)),
        MemoryLine("d", "d1", WHEN, "我上司是医生", subjects=("relation:上司",)),
        QueryLine("a", "qa", later, "我表妹是什么学历", ("a1",), subjects=("relation:表妹",)),
        QueryLine("b", "qb", later, "我表妹在哪里工作", ("b1",), subjects=("relation:表妹",)),
        QueryLine("c", "qc", later, "我上司喜欢什么", ("c1",), subjects=("relation:上司",)),
        QueryLine("d", "qd", later, "我上司是做什么的", ("d1",), subjects=("relation:上司",)),
        QueryLine("a", "chat", later, "我表妹学历是硕士呀", (), about=("a1",)),
    ]
    counts = InjectionCounts()
    await run_engine(lines, (1, 2, 5), injections=counts)
    # a <-> c and b <-> d (half the list away): 表妹 asked of a 上司 person and back, all four certified.
    assert counts.turns["other user"] == 4 and counts.turns[OTHER_CLEAN] == 4
    assert counts.turns["negative"] == 1 and CHAT_CLEAN not in counts.turns  # it states a1: not clean
