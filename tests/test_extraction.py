"""Extraction JSON validation and the merge rules for retold events. Pure: no DB, no clock, no LLM."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, time, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.core.errors import LLMBadResponseError
from companion.core.extraction import (
    MAX_EVENT_CHARS,
    MAX_ITEMS,
    MAX_KEYWORDS,
    Segmenter,
    clean_keywords,
    dedupe_drafts,
    event_key,
    keyword_overlap,
    parse_extraction,
    plan_merge,
    same_event,
)
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Validity, When
from companion.recall.keywords import KeywordExtractor

TODAY = "2025-12-23"
NOW = datetime(2025, 12, 23, 8, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def segment() -> Iterator[Segmenter]:
    extractor = KeywordExtractor()
    extractor.load()
    yield extractor.keywords


def parse_one(item: dict[str, object], segment: Segmenter) -> MemoryDraft:
    drafts = parse_extraction(json.dumps({"memories": [item]}, ensure_ascii=False), segment, TODAY)
    assert len(drafts) == 1
    return drafts[0]


def item(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "event": "2025-12-23 感冒发烧", "keywords": ["感冒", "发烧"], "importance": 85,
        "validity": "30d", "type": "event",
    }
    base.update(fields)
    return base


# ---- the answer's shape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   \n ",
        "not json",
        '{"memories": [',
        "[]",
        '[{"memories": []}]',
        '"memories"',
        "42",
        "null",
        "{}",
        '{"memory": []}',
        '{"memories": {}}',
        '{"memories": "感冒"}',
        '{"memories": null}',
        {"memories": None},
        {},
    ],
)
def test_bad_shape_is_an_error_never_an_empty_list(raw: str | dict[str, object], segment: Segmenter) -> None:
    with pytest.raises(LLMBadResponseError):
        parse_extraction(raw, segment, TODAY)


def test_a_list_passed_as_parsed_json_is_an_error(segment: Segmenter) -> None:
    with pytest.raises(LLMBadResponseError):
        parse_extraction([{"memories": []}], segment, TODAY)  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ['{"memories": []}', {"memories": []}, '```json\n{"memories": []}\n```'])
def test_nothing_to_remember_is_an_empty_list(raw: str | dict[str, object], segment: Segmenter) -> None:
    assert parse_extraction(raw, segment, TODAY) == []


def test_fenced_json_is_accepted(segment: Segmenter) -> None:
    raw = '```json\n{"memories": [{"event": "喜欢喝奶茶", "keywords": ["奶茶"], "importance": 50}]}\n```'
    [draft] = parse_extraction(raw, segment, TODAY)
    assert draft.event == "喜欢喝奶茶"
    assert draft.keywords == ["奶茶"]


def test_full_item_is_read_as_given(segment: Segmenter) -> None:
    draft = parse_one(item(type="preference", validity="permanent", importance=55), segment)
    assert draft == MemoryDraft(
        event="感冒发烧", keywords=["感冒", "发烧"], importance=55.0,
        validity=Validity.PERMANENT, type=MemoryType.PREFERENCE, origin=Origin.EXTRACTED,
    )


@pytest.mark.parametrize(("mtype", "event", "expected", "day"), [
    # A preference or an instruction holds every day: a date before it goes, and none is kept.
    ("preference", "2025-11-25 喜欢喝奶茶", "喜欢喝奶茶", None),
    ("instruction", "2025-1-5 回复别用表情", "回复别用表情", None),
    ("instruction", "每周一不要打扰我", "每周一不要打扰我", None),
    ("fact", "对花生过敏", "对花生过敏", None),
    # What happens on a day keeps the day as data, not in its words.
    ("fact", "2025-12-25 入职新公司", "入职新公司", None),  # before a fact: the day it was told, not data
    ("event", "2025-12-02 去上海出差", "去上海出差", date(2025, 12, 2)),
    ("event", "感冒发烧", "感冒发烧", None),
    # Relative words left in the words are resolved against the day (TODAY is a Tuesday): the words say the date.
    ("event", "下周三去杭州出差", "12月31日（周三）去杭州出差", date(2025, 12, 31)),
    ("event", "明天去医院复查", "12月24日（周三）去医院复查", date(2025, 12, 24)),
])
def test_a_date_becomes_data(mtype: str, event: str, expected: str, day: date | None, segment: Segmenter) -> None:
    draft = parse_one(item(type=mtype, event=event), segment)
    assert draft.event == expected
    assert (draft.happens.on if draft.happens else None) == day


@pytest.mark.parametrize(("fields", "expected"), [
    ({"date": "2025-12-31", "end_date": "2026-01-02"}, When(date(2025, 12, 31), date(2026, 1, 2))),
    ({"date": "2025-05-20", "yearly": True}, When(date(2025, 5, 20), yearly=True)),
    ({"date": "2025-12-24", "time": "14:30"}, When(date(2025, 12, 24), at=time(14, 30))),
    # Malformed or implausible dates are dropped, never guessed, and never fail the item.
    ({"date": "2025-02-30"}, None),
    ({"date": "下周三"}, None),
    ({"date": "2099-01-01"}, None),
    ({"date": 20251224}, None),
    ({"date": "2025-12-24", "end_date": "2025-12-01"}, When(date(2025, 12, 24))),
    ({"date": "2025-12-24", "time": "25:99"}, When(date(2025, 12, 24))),
])
def test_the_models_date_fields(fields: dict[str, object], expected: When | None, segment: Segmenter) -> None:
    draft = parse_one(item(event="去杭州出差", **fields), segment)
    assert draft.happens == expected
    assert draft.event == "去杭州出差"


def test_a_date_alone_is_no_memory(segment: Segmenter) -> None:
    dates = [item(type="fact", event="2026-11-25 "), item(type="event", event="2026-11-25")]
    raw: dict[str, object] = {"memories": dates}
    assert parse_extraction(raw, segment, TODAY) == []


# ---- items -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1000, 100.0),
        (1e300, 100.0),
        (-5, 0.0),
        (-0.5, 0.0),
        ("85", 85.0),
        (" 72.5 ", 72.5),
        ("-3", 0.0),
        ("500", 100.0),
        ("很重要", 50.0),
        ("nan", 0.0),
        (True, 50.0),
        (False, 50.0),
        (None, 50.0),
        ([90], 50.0),
        (60.25, 60.25),
    ],
)
def test_importance_is_clamped(value: object, expected: float, segment: Segmenter) -> None:
    assert parse_one(item(importance=value), segment).importance == expected


def test_missing_importance_is_the_middle_of_the_scale(segment: Segmenter) -> None:
    # 0 would make a memory the model forgot to score unrecallable and delete it at the next cleanup.
    raw: dict[str, object] = {"memories": [{"event": "喜欢猫", "keywords": ["猫咪"]}]}
    assert parse_extraction(raw, segment, TODAY)[0].importance == 50.0


def test_json_infinity_and_nan_are_clamped(segment: Segmenter) -> None:
    raw = '{"memories": [{"event": "a 喜欢猫", "importance": Infinity}, {"event": "b 讨厌狗", "importance": NaN}]}'
    assert [d.importance for d in parse_extraction(raw, segment, TODAY)] == [100.0, 0.0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("permanent", Validity.PERMANENT),
        (" Permanent ", Validity.PERMANENT),
        ("FOREVER", Validity.PERMANENT),
        ("永久", Validity.PERMANENT),
        ("30d", Validity.DAYS_30),
        ("30D", Validity.DAYS_30),
        ("30", Validity.DAYS_30),
        (30, Validity.DAYS_30),
        ("30天", Validity.DAYS_30),
        ("7d", Validity.DAYS_7),
        ("7", Validity.DAYS_7),
        (7, Validity.DAYS_7),
        ("7天", Validity.DAYS_7),
        ("someday", Validity.DAYS_30),
        (None, Validity.DAYS_30),
    ],
)
def test_validity_aliases(value: object, expected: Validity, segment: Segmenter) -> None:
    assert parse_one(item(validity=value), segment).validity is expected


def test_missing_validity_defaults_to_30_days(segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [{"event": "感冒发烧", "keywords": ["感冒"], "importance": 80}]}
    assert parse_extraction(raw, segment, TODAY)[0].validity is Validity.DAYS_30


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("preference", MemoryType.PREFERENCE),
        ("FACT", MemoryType.FACT),
        (" instruction ", MemoryType.INSTRUCTION),
        ("event", MemoryType.EVENT),
    ],
)
def test_known_types(value: str, expected: MemoryType, segment: Segmenter) -> None:
    assert parse_one(item(type=value), segment).type is expected


def test_missing_type_means_event(segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [{"event": "感冒发烧", "keywords": ["感冒"], "importance": 80}]}
    assert parse_extraction(raw, segment, TODAY)[0].type is MemoryType.EVENT


@pytest.mark.parametrize("value", ["feeling", "喜好", "", 3])
def test_unknown_type_is_dropped(value: object, segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [item(type=value), item(event="喜欢喝奶茶", keywords=["奶茶"])]}
    assert [d.event for d in parse_extraction(raw, segment, TODAY)] == ["喜欢喝奶茶"]


@pytest.mark.parametrize("keywords", [[], None, "", "  ", ["", " "], [True, None, {}]])
def test_empty_keywords_are_filled_by_the_segmenter(keywords: object, segment: Segmenter) -> None:
    draft = parse_one(item(event="2025-12-20 我最近感冒发烧了", keywords=keywords), segment)
    assert draft.keywords == ["感冒", "发烧"]


def test_missing_keywords_are_filled_from_the_event_without_its_date(segment: Segmenter) -> None:
    seen: list[str] = []

    def spy(text: str) -> list[str]:
        seen.append(text)
        return segment(text)

    raw: dict[str, object] = {"memories": [{"event": "2025-12-20 对花生过敏", "importance": 90}]}
    [draft] = parse_extraction(raw, spy, TODAY)
    assert seen == ["对花生过敏"]
    assert draft.keywords == ["花生", "过敏"]


def test_item_without_any_keyword_is_dropped(segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [item(event="啊啊", keywords=[]), item(event="对花生过敏", keywords=None)]}
    assert [d.keywords for d in parse_extraction(raw, segment, TODAY)] == [["花生", "过敏"]]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["感冒", "发烧"], ["感冒", "发烧"]),
        ("感冒，发烧、头疼; 咳嗽", ["感冒", "发烧", "头疼", "咳嗽"]),
        (["Coffee", "COFFEE", "咖啡"], ["coffee", "咖啡"]),
        (["奶 茶", "x", "猫"], ["奶茶", "猫"]),  # separators removed; one Latin letter is too short
        ([f"词{i}" for i in range(12)], [f"词{i}" for i in range(MAX_KEYWORDS)]),
        (["感冒", 2025, True, None, ["嵌套"]], ["感冒", "2025"]),
        (["a" * 30], ["a" * 20]),
        ({"感冒": 1}, []),
    ],
)
def test_clean_keywords(value: object, expected: list[str]) -> None:
    assert clean_keywords(value) == expected


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ("感冒了", "感冒了"),
        ("2025-12-20 感冒了", "感冒了"),
        ("2025-1-5 感冒了", "感冒了"),
        ("  感冒\u200b了\n\n好难受 ", "感冒了 好难受"),
    ],
)
def test_event_is_normalised_and_dated(event: str, expected: str, segment: Segmenter) -> None:
    assert parse_one(item(event=event), segment).event == expected


@pytest.mark.parametrize("event", ["很" * 200, "2025-12-20 " + "很" * 200])
def test_event_is_cut_to_50_chars(event: str, segment: Segmenter) -> None:
    draft = parse_one(item(event=event), segment)
    assert len(draft.event) == MAX_EVENT_CHARS
    assert draft.event == "很" * MAX_EVENT_CHARS


@pytest.mark.parametrize("event", [None, "", "   ", "。。。！", "2025-12-20", "2025-12-20 ……", 42, ["感冒"]])
def test_item_without_an_event_is_dropped(event: object, segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [item(event=event), item(event="喜欢喝奶茶", keywords=["奶茶"])]}
    assert [d.event for d in parse_extraction(raw, segment, TODAY)] == ["喜欢喝奶茶"]


def test_extra_keys_are_ignored(segment: Segmenter) -> None:
    draft = parse_one(item(id=99, source="manual", created_at="1999-01-01", mood="sad"), segment)
    assert draft.origin is Origin.EXTRACTED
    assert draft.created_at is None
    assert draft.event == "感冒发烧"


def test_non_dict_items_are_dropped(segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [1, "感冒了", None, ["感冒"], True, item()]}
    assert [d.event for d in parse_extraction(raw, segment, TODAY)] == ["感冒发烧"]


def test_at_most_max_items_are_read(segment: Segmenter) -> None:
    items = [item(event=f"事件编号{i:02d}", keywords=[f"关键{i:02d}"]) for i in range(MAX_ITEMS + 5)]
    raw: dict[str, object] = {"memories": items}
    drafts = parse_extraction(raw, segment, TODAY)
    assert [d.keywords[0] for d in drafts] == [f"关键{i:02d}" for i in range(MAX_ITEMS)]


def test_same_event_twice_in_one_answer_is_one_draft(segment: Segmenter) -> None:
    raw: dict[str, object] = {"memories": [
        item(event="2025-12-22 感冒发烧了", keywords=["感冒"], importance=90, validity="7d"),
        item(event="喜欢喝奶茶", keywords=["奶茶"], importance=50),
        item(event="感冒发烧了！", keywords=["发烧"], importance=70, validity="30d"),
    ]}
    drafts = parse_extraction(raw, segment, TODAY)
    assert [(d.event, d.importance, d.validity) for d in drafts] == [
        ("感冒发烧了！", 90.0, Validity.DAYS_30),
        ("喜欢喝奶茶", 50.0, Validity.DAYS_30),
    ]
    assert drafts[0].keywords == ["发烧", "感冒"]
    assert drafts[0].happens == When(date(2025, 12, 22))  # retold without its day: still that day


# ---- same_event / dedupe / plan_merge --------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "a_kw", "b", "b_kw", "expected"),
    [
        ("2025-12-20 感冒了", ["感冒"], "2025-12-23 感冒了！", ["生病"], True),  # same normalised text
        ("感冒 了", [], "感冒了", [], True),
        ("Likes Tea", [], "likes tea.", [], True),
        ("头疼", ["感冒", "发烧", "头疼"], "生病", ["感冒", "发烧", "头疼"], True),
        ("头疼", ["感冒", "发烧"], "生病", ["感冒", "发烧", "咳嗽"], True),  # 2 shared, 2/3
        ("头疼", ["a1", "b1", "c1", "d1"], "生病", ["a1", "b1", "c1", "e1"], True),  # 3 shared, 3/5 = 0.6
        ("头疼", ["感冒", "发烧", "头疼"], "生病", ["感冒", "发烧", "咳嗽"], False),  # 2/4 = 0.5
        ("头疼", ["感冒"], "生病", ["感冒"], False),  # Jaccard 1 but only one shared keyword
        ("喜欢奶茶", ["奶茶"], "讨厌咖啡", ["咖啡"], False),
        ("喜欢奶茶", [], "讨厌咖啡", [], False),
    ],
)
def test_same_event(a: str, a_kw: list[str], b: str, b_kw: list[str], expected: bool) -> None:
    assert same_event(a, a_kw, b, b_kw) is expected
    assert same_event(b, b_kw, a, a_kw) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([], ["x"], 0.0), (["x"], ["x"], 1.0), (["x", "y"], ["y", "z"], 1 / 3), (["x", "x"], ["x"], 1.0)],
)
def test_keyword_overlap(a: list[str], b: list[str], expected: float) -> None:
    assert keyword_overlap(a, b) == pytest.approx(expected)


def test_event_key_ignores_date_punctuation_space_and_case() -> None:
    assert event_key("2025-12-20  Went Hiking，很开心！") == event_key("went hiking很开心") == "wenthiking很开心"


def draft(event: str, keywords: list[str], importance: float, validity: Validity = Validity.DAYS_30,
          mtype: MemoryType = MemoryType.EVENT) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=keywords, importance=importance, validity=validity, type=mtype)


def memory(mid: int, event: str, keywords: list[str], importance: float,
           validity: Validity = Validity.DAYS_7) -> Memory:
    created = NOW - timedelta(days=3)
    return Memory(
        id=mid, event=event, keywords=keywords, importance=importance, created_at=created, validity=validity,
        last_mentioned_at=None, updated_at=created, expires_at=created + timedelta(days=7),
        type=MemoryType.EVENT, origin=Origin.EXTRACTED, mention_count=2, last_decay_at=created,
    )


def test_dedupe_keeps_newest_wording_and_highest_importance() -> None:
    drafts = [
        draft("2025-12-20 感冒了", ["感冒", "发烧"], 90, Validity.DAYS_7),
        draft("2025-12-21 喜欢喝奶茶", ["奶茶"], 40),
        draft("2025-12-23 又发烧又感冒", ["发烧", "感冒", "难受"], 60, Validity.DAYS_30),
    ]
    kept = dedupe_drafts(drafts)
    assert [(d.event, d.importance, d.validity) for d in kept] == [
        ("2025-12-23 又发烧又感冒", 90, Validity.DAYS_30),
        ("2025-12-21 喜欢喝奶茶", 40, Validity.DAYS_30),
    ]
    assert kept[0].keywords == ["发烧", "感冒", "难受"]


def test_dedupe_keeps_distinct_events() -> None:
    drafts = [draft("喜欢奶茶", ["奶茶"], 50), draft("讨厌咖啡", ["咖啡"], 50)]
    assert dedupe_drafts(drafts) == drafts


def test_retold_event_updates_its_row_instead_of_adding_one() -> None:
    existing = [memory(7, "2025-12-20 感冒了", ["感冒"], 60), memory(8, "2025-12-20 喜欢猫", ["猫咪"], 50)]
    plan = plan_merge(existing, [draft("2025-12-23 感冒了。", ["生病"], 40, Validity.DAYS_30)], NOW)
    assert plan.inserts == []
    [updated] = plan.updates
    assert updated.id == 7
    assert updated.event == "2025-12-23 感冒了。"
    assert updated.importance == 60  # the stored importance was higher
    assert updated.keywords == ["生病", "感冒"]
    assert updated.validity is Validity.DAYS_30  # the longer of the two
    assert updated.updated_at == NOW
    assert updated.expires_at == NOW + timedelta(days=30)
    # What the merge does not own is kept.
    assert (updated.created_at, updated.mention_count) == (existing[0].created_at, 2)
    assert existing[0].event == "2025-12-20 感冒了"  # inputs are not mutated


def test_retold_event_with_higher_importance_raises_it() -> None:
    existing = [memory(7, "2025-12-20 感冒发烧", ["感冒", "发烧", "头疼"], 60)]
    plan = plan_merge(existing, [draft("2025-12-23 发烧还没好", ["感冒", "发烧"], 95)], NOW)
    assert [(m.id, m.event, m.importance) for m in plan.updates] == [(7, "2025-12-23 发烧还没好", 95)]
    assert plan.inserts == []


def test_two_drafts_for_one_stored_event_give_one_update() -> None:
    existing = [memory(3, "2025-12-20 感冒了", ["感冒", "发烧"], 50)]
    drafts = [draft("感冒了", ["感冒", "发烧"], 80), draft("发烧感冒", ["发烧", "感冒"], 70)]
    plan = plan_merge(existing, drafts, NOW)
    assert plan.inserts == []
    assert [(m.id, m.event, m.importance) for m in plan.updates] == [(3, "发烧感冒", 80)]


def test_new_events_are_inserted_next_to_updates() -> None:
    existing = [memory(3, "2025-12-20 感冒了", ["感冒"], 50)]
    drafts = [draft("感冒了", ["感冒"], 80), draft("喜欢喝奶茶", ["奶茶"], 40)]
    plan = plan_merge(existing, drafts, NOW)
    assert [d.event for d in plan.inserts] == ["喜欢喝奶茶"]
    assert [m.id for m in plan.updates] == [3]


def test_permanent_stays_permanent_when_retold_as_short_lived() -> None:
    existing = [memory(1, "对花生过敏", ["花生", "过敏"], 90, Validity.PERMANENT)]
    plan = plan_merge(existing, [draft("对花生过敏", ["花生"], 50, Validity.DAYS_7)], NOW)
    assert plan.updates[0].validity is Validity.PERMANENT
    assert plan.updates[0].expires_at is None


def _dedupe_every_pair(drafts: list[MemoryDraft]) -> list[MemoryDraft]:
    """The plain reference: each draft compared with every kept one, in order."""
    kept: list[MemoryDraft] = []
    for draft in drafts:
        twin = next((i for i, k in enumerate(kept) if same_event(k.event, k.keywords, draft.event, draft.keywords)),
                    None)
        if twin is None:
            kept.append(draft)
        else:
            [kept[twin]] = dedupe_drafts([kept[twin], draft])  # the merge of two of the same event
    return kept


_WORDS = ["猫", "狗", "咖啡", "上海", "生日", "跑步", "hike"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["我养猫", "我养猫。", "喜欢咖啡", "在上海", "2025-01-02 跑步", "跑步"]),
                          st.lists(st.sampled_from(_WORDS), max_size=4)), max_size=25))
def test_dedupe_drafts_equals_comparing_every_pair(items: list[tuple[str, list[str]]]) -> None:
    drafts = [MemoryDraft(event, keywords, 50.0 + n) for n, (event, keywords) in enumerate(items)]
    fresh = [MemoryDraft(event, keywords, 50.0 + n) for n, (event, keywords) in enumerate(items)]
    assert dedupe_drafts(drafts) == _dedupe_every_pair(fresh)
