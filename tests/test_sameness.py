"""The rule that keeps two different facts two memories (``core.sameness``) and its place in the merge
(``extraction.same_event``, ``plan_merge``, ``dedupe_drafts``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from companion.core.extraction import dedupe_drafts, plan_merge, same_event, told_alike
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Validity
from companion.core.sameness import Difference, difference, markers, to_number

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY, NUMBER, NAME, NEGATION = Difference.DAY, Difference.NUMBER, Difference.NAME, Difference.NEGATION


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # a day
        ("周二晚上要练吉他", "周四晚上要练吉他", DAY),
        ("星期天去爬山", "周日去爬山", None),
        ("下周三要去上海出差", "这周三要去上海出差", DAY),
        ("每周一不要打扰我", "每周二不要打扰我", DAY),
        ("明天去看牙医", "后天去看牙医", DAY),
        ("今晚和朋友吃火锅", "明晚和朋友吃火锅", DAY),
        ("12月3日考驾照", "12月5日考驾照", DAY),
        ("3号交房租", "5号交房租", DAY),
        ("2025-12-20 感冒了", "2025-12-23 感冒了，还发烧", None),  # the learned-on date is not the fact's
        ("周二早上跑步", "周二晚上跑步", DAY),
        ("下个月搬家", "这个月搬家", DAY),
        ("周二晚上要练吉他", "晚上要练吉他", None),  # a detail added, not changed
        # a number
        ("第1个测试记忆：今天天气不错", "第2个测试记忆：今天天气不错", NUMBER),
        ("明天下午3点开会", "明天下午5点开会", NUMBER),
        ("下午三点半开会", "下午3点半开会", None),
        ("我养了一只猫", "我养了两只猫", NUMBER),
        ("我养了一只猫", "我养了一只猫，三岁了", None),
        ("这个月花了200块买书", "这个月花了两百元买书", None),
        ("这个月花了200块买书", "这个月花了300块买书", NUMBER),
        ("我今年28岁", "我今年二十八岁", None),
        ("十点睡觉", "10:00睡觉", None),
        # a name or a person
        ("叫我小王", "叫我老王", NAME),
        ("同事小王下周结婚", "同事小李下周结婚", NAME),
        ("我的猫叫咪咪", "我的猫叫花花", NAME),
        ("我妈妈对花生过敏", "我对花生过敏", NAME),
        ("我朋友喜欢爬山", "我同事喜欢爬山", NAME),
        ("我妈喜欢养花", "妈妈喜欢养花", None),
        # a negation
        ("我喜欢香菜", "我不喜欢香菜", NEGATION),
        ("我会游泳", "我不会游泳", NEGATION),
        ("我能喝酒", "我不能喝酒", NEGATION),
        ("我养了一只猫", "我没有养猫", NEGATION),
        ("我喜欢猫", "我讨厌猫", NEGATION),
        ("我不太喜欢吃辣", "我喜欢吃辣", NEGATION),
        ("我一点辣都不吃", "我不吃辣", None),
        ("这家店的面不错", "这家店的面很好吃，不错", None),  # 不错 denies nothing
        # true retellings
        ("我对花生过敏", "我花生过敏", None),
        ("我对花生过敏", "对花生过敏，吃了会起疹子", None),
        # one word swapped for another: kept apart, even when it might be a paraphrase
        ("我养了一只猫", "我养了一只狗", Difference.WORD),
        ("老板张总脾气很差", "老板刘总脾气很差", NAME),
        ("我在北京工作", "我在北京上班", Difference.WORD),
        ("回复我时别用表情", "回复我的时候别用表情", None),  # words added around the same words
        ("喜欢喝拿铁", "咖啡要拿铁", None),  # too little shared to be one sentence with a word swapped
    ],
)
def test_difference(a: str, b: str, expected: Difference | None) -> None:
    assert difference(a, b) is expected
    assert difference(b, a) is expected


@pytest.mark.parametrize(
    ("text", "value"),
    [("3", 3), ("12.5", 12.5), ("十", 10), ("十二", 12), ("二十", 20), ("二十五", 25), ("两百", 200),
     ("三千五百", 3500), ("一万二千", 12000), ("二〇二六", 2026), ("两", 2)],
)
def test_to_number(text: str, value: float) -> None:
    assert to_number(text) == value


def test_markers_read_days_numbers_names_and_negations() -> None:
    found = markers("2025-12-23 下周三下午3点和小王去看电影，我不想迟到")
    assert found.days == {"周下3", "下午"}
    assert found.numbers == {"3点"}
    assert found.names == {"小王"}
    assert "迟" in found.negated and "迟" not in found.plain


@pytest.mark.parametrize(
    ("a", "a_kw", "b", "b_kw", "old", "new"),
    [
        ("周二晚上要练吉他", ["周二", "晚上", "练吉他"], "周四晚上要练吉他", ["周四", "晚上", "练吉他"], False, False),
        ("周二晚上练吉他", ["晚上", "练吉他", "吉他"], "周四晚上练吉他", ["晚上", "练吉他", "吉他"], True, False),
        ("第1个测试记忆", ["测试", "记忆"], "第2个测试记忆", ["测试", "记忆"], True, False),
        ("我喜欢香菜", ["喜欢", "香菜"], "我不喜欢香菜", ["喜欢", "香菜"], True, False),
        ("我对花生过敏", ["花生", "过敏"], "我花生过敏", ["花生", "过敏"], True, True),
        ("感冒了", [], "感冒 了！", [], True, True),  # the same text is always the same fact
        ("喜欢奶茶", ["奶茶"], "讨厌咖啡", ["咖啡"], False, False),
    ],
)
def test_same_event_needs_nothing_to_tell_them_apart(
    a: str, a_kw: list[str], b: str, b_kw: list[str], old: bool, new: bool
) -> None:
    assert told_alike(a, a_kw, b, b_kw) is old
    assert same_event(a, a_kw, b, b_kw) is new
    assert same_event(b, b_kw, a, a_kw) is new


def stored(mid: int, event: str, keywords: list[str]) -> Memory:
    return Memory(id=mid, event=event, keywords=keywords, importance=60.0, created_at=NOW, validity=Validity.DAYS_30,
                  last_mentioned_at=None, updated_at=NOW, expires_at=None, type=MemoryType.EVENT,
                  origin=Origin.EXPLICIT, mention_count=0, last_decay_at=NOW)


def test_plan_merge_keeps_two_facts_apart_and_reports_a_rewording() -> None:
    guitar = stored(1, "周二晚上练吉他", ["晚上", "练吉他", "吉他"])
    peanut = stored(2, "我对花生过敏", ["花生", "过敏"])
    plan = plan_merge([guitar, peanut], [
        MemoryDraft("周四晚上练吉他", ["晚上", "练吉他", "吉他"], 60.0),
        MemoryDraft("我花生过敏", ["花生", "过敏"], 80.0),
    ], NOW)
    assert [d.event for d in plan.inserts] == ["周四晚上练吉他"]
    assert [(m.id, m.event) for m in plan.updates] == [(2, "我花生过敏")]
    assert [(before.event, after.event) for before, after in plan.reworded()] == [("我对花生过敏", "我花生过敏")]


def test_a_retelling_in_the_same_words_is_no_rewording() -> None:
    plan = plan_merge([stored(2, "2025-12-20 对花生过敏", ["花生", "过敏"])],
                      [MemoryDraft("2025-12-23 对花生过敏", ["花生", "过敏"], 80.0)], NOW)
    assert [m.id for m in plan.updates] == [2] and plan.reworded() == []


def test_one_extraction_keeps_two_facts_apart() -> None:
    drafts = [MemoryDraft(f"第{i}个测试记忆：今天天气不错", ["测试", "记忆", "天气"], 50.0) for i in (1, 2, 3)]
    assert len(dedupe_drafts(drafts)) == 3


ALPHABET = "周二四末一两十百第个点半号月不没别叫小老王李我妈今明晚上下午每猫喜欢讨厌，。:.-/0123٣１🎉"
TEXTS = st.text(alphabet=st.sampled_from(list(ALPHABET)), max_size=24)


@given(TEXTS, TEXTS)
def test_difference_never_fails_and_is_symmetric(a: str, b: str) -> None:
    assert difference(a, b) is difference(b, a)
    assert difference(a, a) is None
