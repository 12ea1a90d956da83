"""Keyword recall: matching both ways, the filters a turn applies, ranking, and mention detection."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from companion.core.models import Memory, MemoryType, Origin, Validity
from companion.recall.chars import units
from companion.recall.index import MIN_CLAUSE_COVERAGE, RRF_K, RecallFilter, ScopeIndex, fuse, mentions
from companion.recall.keywords import KeywordExtractor
from companion.recall.query import Query, build_query

NOW = datetime(2025, 12, 23, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
OPEN = RecallFilter(limit=None, min_importance=0.0, min_match=0.0, cooldown_turns=0)


def mem(
    mid: int, keywords: list[str], importance: float = 80.0, *, age: timedelta = DAY,
    mentioned: datetime | None = None, expires: datetime | None = None, event: str = "",
) -> Memory:
    created = NOW - age
    return Memory(
        id=mid, event=event or f"事件{mid}", keywords=keywords, importance=importance, created_at=created,
        validity=Validity.DAYS_30, last_mentioned_at=mentioned, updated_at=created,
        expires_at=expires if expires is not None else NOW + 30 * DAY, type=MemoryType.EVENT,
        origin=Origin.EXTRACTED, mention_count=0, last_decay_at=created,
    )


def ids(index: ScopeIndex, query: list[str], rules: RecallFilter = OPEN, now: datetime = NOW) -> list[int]:
    return [r.memory.id for r in index.rank(query, now, rules)]


# ---- matching --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "stored"),
    [
        ("奶茶", "珍珠奶茶"),  # the turn's word is inside the memory's
        ("感冒药", "感冒"),  # the memory's word is inside the turn's
        ("珍珠奶茶", "奶茶"),
        ("面试", "面试"),
        ("hikes", "hike"),  # English words match by stem
        ("hiking", "hiked"),
    ],
)
def test_containment_matches_both_ways(query: str, stored: str) -> None:
    index = ScopeIndex([mem(1, [stored]), mem(2, ["上班"])])
    found = index.matches([query])
    assert list(found) == [1]
    assert 0.6 <= found[1].match <= 1.0 and found[1].relevance > 0


def test_exact_match_is_stronger_than_containment() -> None:
    index = ScopeIndex([mem(1, ["奶茶"]), mem(2, ["珍珠奶茶"])])
    found = index.matches(["奶茶"])
    assert found[1].match == pytest.approx(1.0)
    assert 0 < found[2].match < found[1].match
    assert found[2].relevance < found[1].relevance


def test_longer_shared_part_matches_better() -> None:
    index = ScopeIndex([mem(1, ["感冒"]), mem(2, ["感冒"])])
    close = ScopeIndex([mem(1, ["感冒药"])]).matches(["感冒"])[1]
    far = ScopeIndex([mem(1, ["感冒药膏贴"])]).matches(["感冒"])[1]
    assert close.match > far.match
    assert [m.match for m in index.matches(["感冒"]).values()] == [pytest.approx(1.0), pytest.approx(1.0)]


@pytest.mark.parametrize(
    "query",
    [
        ["咖啡"],
        ["art"],  # English words match by stem, never by substring
        ["coffee"],
        [],
    ],
)
def test_unrelated_text_finds_nothing(query: list[str]) -> None:
    index = ScopeIndex([mem(1, ["珍珠奶茶"]), mem(2, ["party"]), mem(3, ["coffeehouse"])])
    assert index.matches(query) == {}
    assert ids(index, query) == []


def test_empty_index_finds_nothing() -> None:
    assert ScopeIndex([]).matches(["奶茶"]) == {}


def test_a_query_sharing_more_terms_is_more_relevant() -> None:
    index = ScopeIndex([mem(1, ["感冒", "发烧"]), mem(2, ["旅行"])])
    both = index.matches(["感冒", "发烧"])[1]
    one = index.matches(["感冒"])[1]
    assert both.match == pytest.approx(1.0) and one.match == pytest.approx(1.0)
    assert one.relevance < both.relevance


def test_words_no_memory_has_do_not_dilute_the_match() -> None:
    # "发烧了怎么办": 怎么办 says nothing about which memory is meant.
    index = ScopeIndex([mem(1, ["感冒"]), mem(2, ["旅行"])])
    assert index.matches(["感冒", "天气", "下雨"])[1].match == pytest.approx(1.0)


def test_informative_words_another_memory_has_weaken_the_match() -> None:
    index = ScopeIndex([mem(1, ["感冒"]), mem(2, ["旅行"])])
    assert index.matches(["感冒", "旅行"])[1].match == pytest.approx(0.5)


def test_event_text_is_searchable_with_a_tokenizer() -> None:
    index = ScopeIndex([mem(1, ["生日"], event="2025-12-01 和小红去杭州旅行")], tokenize=lambda t: ["杭州", "旅行"])
    assert list(index.matches(["杭州"])) == [1]
    assert index.matches(["杭州"])[1].relevance < index.matches(["生日"])[1].relevance  # keywords weigh more


# ---- filters ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("importance", "found"), [(49.9, False), (50.0, True), (90.0, True)])
def test_importance_floor(importance: float, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"], importance)])
    rules = RecallFilter(limit=None, min_importance=50.0, min_match=0.0)
    assert ids(index, ["奶茶"], rules) == ([1] if found else [])


@pytest.mark.parametrize(("told", "days", "found"), [
    (60.0, 5, True),  # a 30-day event on its fifth day: 46.4 now, told as 60
    (60.0, 29, True),  # 13.5 now, the last day of its validity: ranked low, still there
    (49.0, 0, False),
    (49.0, 3, False),  # decay never lifts a memory over the floor
    (50.0, 12, True),
])
def test_the_floor_judges_the_importance_a_memory_was_told_with(told: float, days: int, found: bool) -> None:
    decayed = dataclasses.replace(mem(1, ["奶茶"], told * 0.95**days, age=days * DAY + timedelta(hours=1)),
                                  last_decay_at=NOW - timedelta(hours=1))
    rules = RecallFilter(limit=None, min_importance=50.0, min_match=0.0)
    assert ids(ScopeIndex([decayed]), ["奶茶"], rules) == ([1] if found else [])


@pytest.mark.parametrize(("expires", "found"), [(NOW - timedelta(seconds=1), False), (NOW, False),
                                                 (NOW + timedelta(seconds=1), True)])
def test_expired_memories_are_skipped(expires: datetime, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"], expires=expires)])
    assert ids(index, ["奶茶"]) == ([1] if found else [])


def test_min_match_filters_weak_matches() -> None:
    index = ScopeIndex([mem(1, ["感冒", "发烧", "头疼", "咳嗽"]), mem(2, ["感冒", "旅行", "海边"])])
    rules = RecallFilter(limit=None, min_importance=0.0, min_match=0.8)
    assert ids(index, ["感冒", "咳嗽"], rules) == [1]


def test_a_memory_mostly_covered_is_touched_even_amid_chatter() -> None:
    # "今天天气不错，吃了火锅，看了电视……对了，小王的生日是哪天？"
    chatter = [mem(i, [word]) for i, word in enumerate(["天气", "火锅", "电视", "公园", "地铁"], start=10)]
    index = ScopeIndex([mem(1, ["小王", "生日"]), *chatter])
    rules = RecallFilter(limit=None, min_importance=0.0, min_match=0.34)
    found = index.rank(["天气", "火锅", "电视", "公园", "地铁", "小王", "生日"], NOW, rules)
    assert 1 in [r.memory.id for r in found]
    assert index.matches(["天气", "火锅", "电视", "公园", "地铁", "小王", "生日"])[1].match < 0.34


@pytest.mark.parametrize(("turn", "found"), [(10, False), (11, False), (14, False), (15, True), (40, True)])
def test_cooldown_blocks_a_memory_for_five_turns(turn: int, found: bool) -> None:
    index = ScopeIndex([mem(1, ["奶茶"]), mem(2, ["奶茶", "珍珠"])])
    rules = RecallFilter(limit=None, min_importance=0.0, cooldown_turns=5, turn=turn, cooldown={1: 10})
    assert (1 in ids(index, ["奶茶"], rules)) is found
    assert 2 in ids(index, ["奶茶"], rules)  # only the recalled memory cools down


@pytest.mark.parametrize("cooldown_turns", [0, -1])
def test_cooldown_off(cooldown_turns: int) -> None:
    index = ScopeIndex([mem(1, ["奶茶"])])
    rules = RecallFilter(limit=None, min_importance=0.0, cooldown_turns=cooldown_turns, turn=10, cooldown={1: 10})
    assert ids(index, ["奶茶"], rules) == [1]


@pytest.mark.parametrize(("limit", "count"), [(None, 4), (0, 0), (1, 1), (2, 2), (10, 4)])
def test_limit(limit: int | None, count: int) -> None:
    index = ScopeIndex([mem(i, ["奶茶"], 60 + i) for i in range(1, 5)])
    found = ids(index, ["奶茶"], RecallFilter(limit=limit, min_importance=0.0))
    assert found == [4, 3, 2, 1][:count]


@pytest.mark.parametrize(("allowed", "limit", "expected"), [
    (None, 2, [8, 7]),
    ({2}, 2, [2]),  # the six better ones may not be recalled: they take no place in the gate's depth
    ({2, 5, 7}, 2, [7, 5]),
    ({2, 5, 7}, None, [7, 5, 2]),
    (set(), 2, []),
])
def test_only_allowed_memories_are_gated(allowed: set[int] | None, limit: int | None, expected: list[int]) -> None:
    index = ScopeIndex([mem(i, ["奶茶"], 60 + i) for i in range(1, 9)])
    rules = RecallFilter(limit=limit, min_importance=0.0, min_match=0.0, allowed=allowed)
    assert ids(index, ["奶茶"], rules) == expected


def test_recall_filter_defaults() -> None:
    rules = RecallFilter()
    assert (rules.limit, rules.min_importance, rules.min_match, rules.cooldown_turns) == (2, 50.0, 0.25, 5)


# ---- ranking ---------------------------------------------------------------------------------------


def test_better_match_ranks_first() -> None:
    index = ScopeIndex([mem(1, ["珍珠奶茶"], 80), mem(2, ["奶茶"], 80)])
    assert ids(index, ["奶茶"]) == [2, 1]


def test_better_match_beats_higher_importance() -> None:
    index = ScopeIndex([mem(1, ["感冒", "头疼"], 100), mem(2, ["感冒", "发烧"], 60), mem(3, ["发烧", "咳嗽"], 50)])
    assert ids(index, ["感冒", "发烧"])[0] == 2


def test_equal_match_ranks_by_importance() -> None:
    index = ScopeIndex([mem(1, ["奶茶"], 60), mem(2, ["奶茶"], 90), mem(3, ["奶茶"], 75)])
    assert ids(index, ["奶茶"]) == [2, 3, 1]


def test_equal_match_and_importance_ranks_by_recency() -> None:
    index = ScopeIndex([
        mem(1, ["奶茶"], 70, age=2 * DAY),
        mem(2, ["奶茶"], 70, age=60 * DAY),
        mem(3, ["奶茶"], 70, age=60 * DAY, mentioned=NOW - DAY / 2),  # old, but just mentioned
    ])
    assert ids(index, ["奶茶"]) == [3, 1, 2]


def test_recalled_carries_its_score_and_match() -> None:
    index = ScopeIndex([mem(1, ["奶茶"], 100, age=timedelta(0)), mem(2, ["咖啡"], 100, age=timedelta(0))])
    [hit] = index.rank(["奶茶"], NOW, OPEN)
    assert hit.match == pytest.approx(1.0)
    # First in both rankings: the fused score of a memory both place first.
    assert hit.score == pytest.approx(2 / (RRF_K + 1))


# ---- mentions ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "keywords", "expected"),
    [
        ("你的感冒好点了吗？", ["感冒", "发烧"], True),
        ("今天还发烧吗", ["感冒", "发烧"], True),
        ("Still drinking COFFEE?", ["coffee"], True),
        ("今天天气不错", ["感冒", "发烧"], False),
        ("猫咪还好吗", ["猫"], False),  # one-character keywords are too ambiguous to count
        ("", ["感冒"], False),
        ("感冒", [], False),
    ],
)
def test_mentions(reply: str, keywords: list[str], expected: bool) -> None:
    assert mentions(reply, mem(1, keywords)) is expected


# ---- character index, fusion, context query and gate --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "present", "absent"),
    [
        ("种花呢", {"种", "花", "种花", "花呢"}, {"呢"}),  # a pair with one function character still counts
        ("王同学", {"王同", "同学", "王"}, set()),
        ("我的猫", {"猫", "的猫"}, {"我的", "我", "的"}),  # a pair of two function characters does not
        ("Hiking trips with the kids", {"hik", "trip", "kid"}, {"the", "with"}),  # English: stemmed words
        ("ＡＢＣ 2024", {"abc"}, {"2024"}),  # full width folded; bare numbers say nothing
    ],
)
def test_units(text: str, present: set[str], absent: set[str]) -> None:
    found = units(text)
    assert present <= set(found)
    assert not absent & set(found)


@pytest.mark.parametrize(
    ("rankings", "expected"),
    [
        ([{1: 9.0, 2: 5.0}, {2: 3.0, 1: 1.0}], [2, 1]),  # equal fused score: the newer memory first
        ([{1: 9.0, 2: 5.0, 3: 4.0}, {2: 3.0, 3: 2.0}], [2, 3, 1]),  # placed by both beats first in one
        ([{1: 1.0}, {}], [1]),
        ([{}, {}], []),
    ],
)
def test_reciprocal_rank_fusion(rankings: list[dict[int, float]], expected: list[int]) -> None:
    assert [mid for mid, _ in fuse(rankings)] == expected


@pytest.fixture(scope="module")
def extractor() -> KeywordExtractor:
    keywords = KeywordExtractor()
    keywords.load()
    return keywords


def scope(extractor: KeywordExtractor) -> ScopeIndex:
    """A small user: memories as extraction writes them (event, keywords, index terms)."""
    facts = [
        ("感冒发烧了，在家休息", ["感冒", "发烧", "生病", "不舒服"]),
        ("最近在阳台种花，种了月季", ["种花", "阳台", "月季"]),
        ("王同学下个月结婚", ["王同学", "结婚"]),
        ("网购的鞋子尺码不对想退货", ["退货", "鞋子", "网购"]),
        ("家里的小狗叫豆豆，三岁了", ["小狗", "豆豆", "宠物"]),
        ("在准备考研，每天去图书馆", ["考研", "图书馆"]),
    ]
    return ScopeIndex([
        dataclasses.replace(mem(i, keywords, event=event), terms=extractor.keywords(event, limit=64))
        for i, (event, keywords) in enumerate(facts, start=1)
    ], extractor.keywords)


def recall(index: ScopeIndex, extractor: KeywordExtractor, text: str, rules: RecallFilter = OPEN,
           earlier: tuple[str, ...] = ()) -> list[int]:
    query = build_query(text, extractor.keywords, earlier=earlier)
    return [r.memory.id for r in index.rank(query, NOW, rules)]


BOT = RecallFilter(min_importance=0.0)  # the bot's gate and limit


@pytest.mark.parametrize(
    ("turn", "expected", "rules"),
    [
        ("王同学最近怎么样", 3, BOT),  # jieba: 王 + 同学 here, 王同学 in the memory
        ("周末又种花呢", 2, OPEN),  # jieba: 种 + 花呢 here, 种花 in the memory
        ("那双鞋退换好麻烦", 4, OPEN),  # paraphrase sharing characters: 退换 / 退货
        ("狗狗今天特别乖", 5, OPEN),  # 狗狗 / 小狗
        ("我今天又有点不舒服", 1, BOT),
        ("最近忙着考研复习，好久没出门了，今天天气不错，下午去图书馆看书", 6, BOT),  # a long, chatty turn
    ],
)
def test_found_across_splits_and_paraphrases(extractor: KeywordExtractor, turn: str, expected: int,
                                             rules: RecallFilter) -> None:
    assert recall(scope(extractor), extractor, turn, rules)[:1] == [expected]


@pytest.mark.parametrize(
    "turn", ["哈哈哈你说得对", "晚安啦，明天还要早起", "嗯嗯好的", "今天好累啊", "你在干嘛呢", "今天天气真好"]
)
def test_chit_chat_injects_nothing(extractor: KeywordExtractor, turn: str) -> None:
    assert recall(scope(extractor), extractor, turn, BOT) == []


def test_the_topic_of_an_earlier_turn_carries_a_pronoun(extractor: KeywordExtractor) -> None:
    index = scope(extractor)
    assert recall(index, extractor, "它今天还是不吃饭")[:1] != [5]
    assert recall(index, extractor, "它今天还是不吃饭", earlier=("我家豆豆最近不太精神",))[:1] == [5]


def test_the_current_turn_outweighs_the_context(extractor: KeywordExtractor) -> None:
    found = recall(scope(extractor), extractor, "考研的事情", earlier=("结婚的事情",))
    assert found[:2] == [6, 3]


def test_context_alone_is_weaker_evidence_than_the_turn(extractor: KeywordExtractor) -> None:
    index = scope(extractor)
    on_topic = build_query("王同学要结婚了", extractor.keywords)
    in_context = build_query("今天去买菜了", extractor.keywords, earlier=("王同学要结婚了",))
    [now] = [r.match for r in index.rank(on_topic, NOW, OPEN) if r.memory.id == 3]
    [before] = [r.match for r in index.rank(in_context, NOW, OPEN) if r.memory.id == 3]
    assert before < now


def test_index_follows_writes_and_removals(extractor: KeywordExtractor) -> None:
    index = scope(extractor)
    index.remove(2)
    assert 2 not in recall(index, extractor, "周末又种花呢")
    index.add(dataclasses.replace(mem(2, ["种花"], event="阳台上种花"), terms=["阳台", "种花"]))
    assert recall(index, extractor, "周末又种花呢")[:1] == [2]


def test_the_query_reads_each_clause_apart(extractor: KeywordExtractor) -> None:
    query = build_query("我表弟是做什么工作的呢？另外，竞技羽毛球盛宴的持续时间是什么？", extractor.keywords)
    assert len(query.clauses) == 2
    assert "表弟" in query.clauses[0] and "表弟" not in query.clauses[1]
    assert "盛宴" in query.clauses[1]
    assert build_query("哈哈", extractor.keywords).clauses == []  # no content word, no clause
    assert Query.from_words(["奶茶"]).clauses == []  # bare words tell no clauses


@pytest.mark.parametrize(
    ("turn", "memory", "touched"),
    [
        # Shares only function words with the turn ("什么"), though they are most of the memory.
        ("那个22岁的人生日是什么时候呢？", "对对对，你说什么就是什么吧", False),
        # The memory is one clause of a two-question turn.
        ("我表弟是做什么工作的呢？另外，竞技羽毛球盛宴的持续时间是什么？", "竞技羽毛球盛宴的持续时间是四天。", True),
    ],
)
def test_a_touched_memory_covers_part_of_one_clause(extractor: KeywordExtractor, turn: str, memory: str,
                                                    touched: bool) -> None:
    fillers = [dataclasses.replace(mem(i, extractor.keywords(e, limit=8), event=e), terms=extractor.keywords(e))
               for i, e in enumerate(["晚上吃了凉皮", "我喜欢骑自行车", "周末去公园散步"], start=2)]
    target = dataclasses.replace(mem(1, extractor.keywords(memory, limit=8), event=memory),
                                 terms=extractor.keywords(memory))
    index = ScopeIndex([target, *fillers], extractor.keywords)
    query = build_query(turn, extractor.keywords)
    assert index.rank(query, NOW, OPEN)[0].memory.id == 1  # ranked first either way: the gate decides
    assert (1 in [r.memory.id for r in index.rank(query, NOW, BOT)]) is touched


def test_a_question_word_glued_to_the_verb_does_not_hide_the_topic(extractor: KeywordExtractor) -> None:
    # jieba cuts 哪天练 as one word; no memory holds it, and it used to keep the guitar memories below the gate.
    assert "哪天练" not in extractor.keywords("我这周哪天练吉他来着")
    facts = ["我周三和周五晚上练吉他", "家里的小狗叫豆豆，三岁了", "今天晚饭吃了牛肉面"]
    index = ScopeIndex([dataclasses.replace(mem(i, extractor.keywords(e), event=e), terms=extractor.keywords(e))
                        for i, e in enumerate(facts, start=1)], extractor.keywords)
    assert recall(index, extractor, "我这周哪天练吉他来着", BOT) == [1]


@pytest.mark.parametrize(("earlier", "reply", "turn", "expected"), [
    # A change of topic: the window's words (the peanuts, the cat, the reply) must not hide what the turn names.
    (("晚上吃了点花生米", "我的猫今天好乖"), "嗯嗯，我记着呢。", "我这周哪天练吉他来着", [3]),
    (("晚上吃了点花生米", "今天加班好累"), "辛苦啦，早点休息。", "我的猫叫什么来着", [2]),
    # A vague turn: the window names the topic (the cat), as before.
    (("我的猫最近不吃饭",), None, "它今天还是没精神", [2]),
    # Neither the turn nor the window touches a memory: nothing.
    (("今天加班好累",), "辛苦啦。", "明天要下雨吗", []),
])
def test_the_window_helps_a_vague_turn_and_never_hides_the_turns_own_topic(
    extractor: KeywordExtractor, earlier: tuple[str, ...], reply: str | None, turn: str, expected: list[int]
) -> None:
    facts = [("对花生过敏", ["花生", "过敏"]), ("养了一只猫叫年糕，最近不爱吃饭", ["猫", "年糕"]),
             ("在学吉他，每周练三次", ["吉他", "练琴"])]
    index = ScopeIndex([dataclasses.replace(mem(i, keywords, event=e), terms=extractor.keywords(e))
                        for i, (e, keywords) in enumerate(facts, start=1)], extractor.keywords)
    query = build_query(turn, extractor.keywords, earlier=earlier, reply=reply)
    assert [r.memory.id for r in index.rank(query, NOW, BOT)] == expected


def test_one_chance_word_of_a_short_question_is_not_a_match(extractor: KeywordExtractor) -> None:
    # Three content words: a memory holding one of them shares a third of the question by chance, which a share
    # threshold chosen on Chinese turns (twenty units, one unit a twentieth) lets through. The gate counts the
    # match beyond what that one word alone gives, so the same threshold holds in both languages.
    facts = ["Jon: I watched the sunrise from the pier this morning", "Jon: I painted the sunrise at the lake",
             "Gina: my dance studio opens next week", "Jon: we went hiking with the kids",
             "Gina: the new shoes hurt my feet", "Jon: I lost my job at the bank"]
    index = ScopeIndex([dataclasses.replace(mem(i, [], event=event), terms=extractor.keywords(event, limit=64))
                        for i, event in enumerate(facts, start=1)], extractor.keywords)
    # Asked of another user's memories: "dance" is all they share, about half of the question's information.
    query = build_query("How was Melanie's dance?", extractor.keywords)
    found, coverage = index.evidence(3, query)
    assert found.share >= BOT.min_match and coverage >= MIN_CLAUSE_COVERAGE  # a plain share would admit it
    assert index.rank(query, NOW, BOT) == []
    # Two of the question's words are more than chance.
    assert [r.memory.id for r in index.rank(build_query("Where did Melanie watch the sunrise?", extractor.keywords),
                                            NOW, BOT)] == [1]
    # A Chinese turn keeps what it had: one shared word of several characters is more than one unit.
    assert recall(scope(extractor), extractor, "我今天又有点不舒服", BOT) == [1]


@pytest.mark.parametrize(("learned", "since", "found"), [
    (NOW - 2 * DAY, NOW - timedelta(minutes=5), True),  # an older memory the earlier turn is about
    (NOW - timedelta(minutes=1), NOW - timedelta(minutes=5), False),  # learned from those turns
    (NOW - timedelta(minutes=1), None, True),  # when the turns were said is not known: as before
])
def test_a_memory_learned_since_the_window_was_said_is_not_recalled_through_it(
    learned: datetime, since: datetime | None, found: bool,
) -> None:
    memory = dataclasses.replace(mem(1, ["猫", "咪咪"], event="养了一只猫叫咪咪"), created_at=learned,
                                 last_decay_at=learned)
    index = ScopeIndex([memory])
    query = build_query("今天天气还不错", lambda t: t.split(), earlier=["我养了一只猫 咪咪 特别 粘人"])
    rules = RecallFilter(limit=None, min_importance=0.0, window_since=since)
    assert [r.memory.id for r in index.rank(query, NOW, rules)] == ([1] if found else [])


@pytest.mark.parametrize(("word", "distinctive"), [
    ("雅思", True), ("爬山", True), ("年糕", True),  # rare in general Chinese
    ("失眠", True), ("面试", True),  # the shipped user dictionary's topic words
    ("布玛", True),  # a name the dictionary lacks
    ("朋友", False), ("工作", False), ("今天", False), ("准备", False),  # everyday words
    ("我会", False), ("还行", False),  # rare in the dictionary, but phrases around a function word
    ("周六", False), ("昨晚", False), ("两点", False), ("超级", False),  # rare, but times, numbers, degrees
    ("ielts", False),  # no counts for English
])
def test_distinctive_words(extractor: KeywordExtractor, word: str, distinctive: bool) -> None:
    assert extractor.distinctive(word) is distinctive


def anchored_scope(extractor: KeywordExtractor) -> ScopeIndex:
    facts = [("2026-12-15 考雅思", ["雅思", "考试", "英语"]), ("2026-11-28 和朋友去爬山", ["爬山", "周六", "朋友"]),
             ("最近失眠挺严重的", ["失眠", "睡不着", "睡眠"]), ("在一家游戏公司做策划", ["游戏公司", "策划", "工作"])]
    return ScopeIndex([dataclasses.replace(mem(i, keywords, event=e), terms=extractor.keywords(e))
                       for i, (e, keywords) in enumerate(facts, start=1)], extractor.keywords)


@pytest.mark.parametrize(("turn", "expected"), [
    # One distinctive word of the turn is one of the memory's keywords: the topic, however little else is shared.
    ("雅思的口语部分好难", [1]),
    ("爬山要带什么装备", [2]),
    ("昨晚又失眠了", [3]),
    # An everyday word shared with a keyword is not: the share decides, as before.
    ("朋友说螃蟹很好吃", []),
    ("今天工作好忙", []),
    ("今天天气还行", []),
])
def test_a_distinctive_word_the_turn_shares_with_a_keyword_touches_the_memory(
    extractor: KeywordExtractor, turn: str, expected: list[int],
) -> None:
    index = anchored_scope(extractor)
    plain = build_query(turn, extractor.keywords)
    assert index.rank(plain, NOW, BOT) == [] or expected == [], "the share alone already admitted it"
    query = build_query(turn, extractor.keywords, distinctive=extractor.distinctive)
    assert [r.memory.id for r in index.rank(query, NOW, BOT)] == expected


def test_only_the_turns_own_words_anchor(extractor: KeywordExtractor) -> None:
    index = anchored_scope(extractor)
    query = build_query("今天天气还行", extractor.keywords, earlier=("雅思的口语部分好难",),
                        distinctive=extractor.distinctive)
    assert "雅思" not in query.anchors
    assert [r.memory.id for r in index.rank(query, NOW, BOT)] == []
    # The floor, the expiry and the cooldown still apply to an anchored memory.
    cooling = dataclasses.replace(BOT, cooldown={1: 3}, turn=4)
    assert index.rank(build_query("雅思的口语部分好难", extractor.keywords, distinctive=extractor.distinctive),
                      NOW, cooling) == []
