"""The compact dictionary cuts text exactly as jieba's own dictionary does, and caches itself safely."""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import jieba
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import script_zh, synth
from companion.recall import dictionary
from companion.recall import keywords as keywords_module
from companion.recall.dictionary import CompactTokenizer, build_dictionary, load_dictionary
from companion.recall.keywords import KeywordExtractor

ADDED = ("王同学", "种花", "花生酱过敏", "布丁", "DeepSeek")


def _prepare(tokenizer: jieba.Tokenizer) -> jieba.Tokenizer:
    jieba.setLogLevel(logging.WARNING)
    tokenizer.initialize()
    package = resources.files("companion.recall.resources")
    with resources.as_file(package / "userdict.txt") as path:
        tokenizer.load_userdict(str(path))
    for word in ADDED:
        tokenizer.add_word(word, freq=2000)
    tokenizer.del_word("今天天气")  # a dictionary word deleted at run time is no word any more
    return tokenizer


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CompactTokenizer, jieba.Tokenizer]]:
    compact = _prepare(CompactTokenizer(cache_dir=tmp_path_factory.mktemp("dict")))
    plain = _prepare(jieba.Tokenizer())
    yield compact, plain


def _lines(part: object) -> Iterator[str]:
    """Every string inside one of the Chinese script's turn tuples."""
    if isinstance(part, str):
        yield part
    elif isinstance(part, (tuple, list)):
        for item in part:
            yield from _lines(item)
    elif isinstance(part, dict):
        for item in part.values():
            yield from _lines(item)


def _corpus() -> list[str]:
    rng = random.Random(3)
    texts = [line for part in (script_zh.MORNING, script_zh.HEALTH, script_zh.SMALL_TALK, script_zh.JOB,
                               script_zh.PREFERENCES, script_zh.EVENING) for line in _lines(part)]
    texts += [synth.message(rng) for _ in range(400)]
    texts += [m.event for m in synth.memories(rng, 400, datetime(2025, 6, 1, tzinfo=UTC))]
    texts += ["我今天天气很好，和王同学去种花了", "种花呢还是不种", "他对花生酱过敏，DeepSeek说的", "南京市长江大桥",
              "我在北京清华大学读研究生，今天天气不错", "乒乓球拍卖完了", "结婚的和尚未结婚的", "研究生命起源"]
    return texts


def test_cuts_equal_jiebas_on_dialogue(pair: tuple[CompactTokenizer, jieba.Tokenizer]) -> None:
    compact, plain = pair
    corpus = _corpus()
    assert len(corpus) > 500
    differing = [text for text in corpus if compact.lcut(text) != plain.lcut(text)]
    assert differing == []


def test_added_and_deleted_words_behave_as_in_jieba(pair: tuple[CompactTokenizer, jieba.Tokenizer]) -> None:
    compact, plain = pair
    for text in ("和王同学去种花", "今天天气很好", "花生酱过敏的布丁"):
        assert compact.lcut(text) == plain.lcut(text)
    assert "王同学" in compact.lcut("和王同学去种花")
    assert "今天天气" not in compact.lcut("今天天气很好")
    assert compact.FREQ.get("王同学") == 2000
    assert compact.FREQ.get("今天天气") == 0
    assert compact.FREQ.get("医院") == plain.FREQ.get("医院")
    assert compact.total == plain.total


_WORDS = st.sampled_from(["医院", "感冒", "我", "今天", "去", "了", "看", "医生", "的", "花生", "过敏", "王", "同学",
                          "种", "花", "呢", "北京", "大学", "，", "。", "abc", "2024", " ", "？", "喝水", "天气"])
_CHARS = st.characters(min_codepoint=0x4E00, max_codepoint=0x4FFF)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(_WORDS, _CHARS), max_size=30))
def test_cuts_equal_jiebas_on_any_text(pair: tuple[CompactTokenizer, jieba.Tokenizer], pieces: list[str]) -> None:
    compact, plain = pair
    text = "".join(pieces)
    assert compact.lcut(text) == plain.lcut(text)


def test_the_dictionary_is_built_once_then_loaded(tmp_path: Path) -> None:
    trie, counts, total, tags = load_dictionary(tmp_path)
    cached = sorted(p.name for p in tmp_path.iterdir())
    assert [name.rsplit(".", 1)[1] for name in cached] == ["freq", "tags", "trie"]
    again, again_counts, again_total, again_tags = load_dictionary(tmp_path)
    assert (len(again), list(again_counts[:100]), again_total) == (len(trie), list(counts[:100]), total)
    assert list(again_tags) == list(tags)
    assert [dictionary.TAGS[tags[trie[w]]] for w in ("医院", "周六", "两点", "雅思")] == ["n", "t", "m", "nr"]
    assert len(trie) == 349_046 - 1  # dict.txt lists one word twice
    with dictionary._dict_path().open("rb") as source:
        assert counts[trie["医院"]] == jieba.Tokenizer.gen_pfdict(source)[0]["医院"]


def test_a_damaged_cache_is_rebuilt(tmp_path: Path) -> None:
    load_dictionary(tmp_path)
    for path in tmp_path.iterdir():
        path.write_bytes(b"garbage")
    trie, counts, total, tags = load_dictionary(tmp_path)
    assert len(counts) == len(trie) == len(tags) and total > 0
    assert counts[trie["感冒"]] > 0
    fresh = build_dictionary(dictionary._dict_path())
    assert total == fresh[2]


def test_an_unwritable_cache_costs_only_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "not-a-folder"
    missing.write_text("a file where the folder should be")
    trie, _, total, _ = load_dictionary(missing)
    assert len(trie) > 300_000 and total > 0
    assert "cannot cache the word dictionary" in caplog.text


@pytest.fixture(scope="module")
def extractor() -> KeywordExtractor:
    made = KeywordExtractor()
    made.load()
    return made


_DATES = st.builds(lambda y, m, d, gap: f"{y}-{m}-{d}{gap}", st.integers(1000, 9999), st.integers(1, 12),
                   st.integers(1, 31), st.sampled_from(["", " ", "  ", "\t", " \u3000", "\n"]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_DATES, st.lists(st.one_of(_WORDS, _CHARS), max_size=20))
def test_a_leading_date_is_skipped_without_changing_the_words(
    extractor: KeywordExtractor, date: str, pieces: list[str]
) -> None:
    text = date + "".join(pieces)
    shortcut = extractor.tokens(text)
    kept = keywords_module._LEADING_DATE
    keywords_module._LEADING_DATE = re.compile(r"(?!)")  # never matches: the whole text is cut
    try:
        assert shortcut == extractor.tokens(text)
    finally:
        keywords_module._LEADING_DATE = kept
