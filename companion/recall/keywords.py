"""Keyword extraction with jieba: a private tokenizer, the shipped user dictionary and stopwords."""

from __future__ import annotations

import functools
import logging
import re
import threading
import unicodedata
from collections.abc import Iterable
from concurrent.futures import Future
from importlib import resources

import jieba

from companion.core.text import MAX_KEYWORD_CHARS, normalize_text
from companion.recall.dictionary import CompactTokenizer

log = logging.getLogger(__name__)

_WORDISH = re.compile(r"[\w\u4e00-\u9fff]", re.UNICODE)
_DIGITS = re.compile(r"^[\d.,:/\-]+$")
# The date a stored event starts with ("2025-04-05 表哥请我吃饭"): never a content word (``_DIGITS``), and
# cutting it cost a third of a short event's segmentation. Only before whitespace, where jieba cuts the
# rest as a block of its own, so the words are the same with or without it.
_LEADING_DATE = re.compile(r"\s*\d{4}-\d{1,2}-\d{1,2}\s+")
_CJK = re.compile(r"[\u3400-\u9fff]")
KEYWORD_CACHE = 4096
# jieba glues a question word to the verb after it ("哪天练" in 我这周哪天练吉他来着): such a word matches no
# memory ("我周三练吉他" holds 练, not 哪天练) and fills the turn's content with units no memory has. The question
# part is cut off; what remains is a content word when it is one.
_QUESTION_HEAD = re.compile(
    r"^(?:为什么|什么时候|哪天|哪里|哪儿|哪个|哪些|什么|怎么|多少|几点|几时|几天|几个|几次)(?=.)"
)
# A word that appears at most this many times in jieba's dictionary counts (~60 million words of general
# Chinese) names a topic on its own: "雅思" (183), "爬山" (117), a pet's name; "朋友" (9,200), "工作" (66,367)
# and "今天" do not. A word the dictionary lacks (a name jieba's HMM found) is as rare as a word can be, and
# the life topics the shipped user dictionary and the configured important keywords add ("失眠", "面试") name
# one by design. Chosen on the benchmarks' Chinese sets (docs/benchmarks-history.md section 22): 2,000 and 3,000 took
# MemDaily's certified false injection over 10%.
THING_MAX_COUNT = 3000  # 虾 1,389 and 嗓子 772 are things; 公司 45,604 and 材料 9,137 are everyday words
DISTINCTIVE_MAX_COUNT = 1000
# Parts of speech (jieba's dictionary tags) that name no topic however rare: time words ("周六" 341, "昨晚"),
# numerals and measures ("两点", "五百"), pronouns, adverbs, distinguishing words ("超级"), adjectives, and the
# function words.
_NOT_TOPICS = frozenset({"t", "tg", "m", "mq", "mg", "q", "vq", "r", "rr", "rz", "rg", "d", "dg", "df", "vd", "ad",
                         "b", "a", "ag", "an", "f", "p", "c", "u", "uz", "uv", "ul", "uj", "ug", "ud", "y", "e", "o",
                         "x", "k", "h", "z", "zg"})
# A word right after a degree adverb is said of something, not a thing itself: "没好利索" (利索, an adjective
# jieba's dictionary lists as a noun), "太油腻". Chinese puts no degree adverb before a noun.
_DEGREE = re.compile(r"(?:很|太|好|挺|真|蛮|超|特别|非常|比较|更|最|越来越|有点|有些|不太|不够)$")
# Found beside this module, so a host that vendors the engine under another package name finds them too.
RESOURCES = __name__.rpartition(".")[0] + ".resources"


class KeywordExtractor:
    """Segments text into content words with jieba's segmentation over a compact copy of its dictionary
    (``dictionary.CompactTokenizer``: ~3 MB instead of ~60). ``load()`` takes ~0.01 s (~1 s the first
    time, when the dictionary is built and cached): the engine starts it in a thread at start-up and the
    first use waits for what is left of it."""

    def __init__(self) -> None:
        self._tokenizer = CompactTokenizer()
        self._stopwords: frozenset[str] = frozenset()
        self._loaded = False
        self._lock = threading.Lock()
        self._extra: list[str] = []  # words added before the dictionaries were loaded
        self._extra_lock = threading.Lock()
        self._preloading: Future[None] | None = None
        # A turn is read again as context on the next two turns: segment each text once.
        self._cached = functools.lru_cache(maxsize=KEYWORD_CACHE)(self._keywords)

    def load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            jieba.setLogLevel(logging.WARNING)
            self._tokenizer.initialize()
            package = resources.files(RESOURCES)
            with resources.as_file(package / "userdict.txt") as path:
                self._tokenizer.load_userdict(str(path))
            text = (package / "stopwords.txt").read_text(encoding="utf-8")
            self._stopwords = frozenset(line.strip() for line in text.splitlines() if line.strip())
            self._loaded = True
        self._add_extra()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def preload(self) -> Future[None]:
        """Start loading in a thread of its own (once); the future tells when it is done or why it failed."""
        with self._extra_lock:
            if self._preloading is None:
                self._preloading = Future()
                threading.Thread(target=self._load_into, args=(self._preloading,), name="jieba-load",
                                 daemon=True).start()
            return self._preloading

    def _load_into(self, done: Future[None]) -> None:
        try:
            self.load()
        except BaseException as exc:  # handed to whoever waits on the future
            done.set_exception(exc)
        else:
            done.set_result(None)

    def add_words(self, words: Iterable[str]) -> None:
        """Teach the tokenizer extra words (the configured important keywords) so they stay whole; before
        the dictionaries are loaded they wait for the load (this never blocks on it)."""
        with self._extra_lock:
            self._extra.extend(w for w in words if w)
        if self._loaded:
            self._add_extra()

    def _add_extra(self) -> None:
        with self._extra_lock:
            extra, self._extra = self._extra, []
        for word in extra:
            self._tokenizer.add_word(word, freq=2000)
        if extra:
            self._cached.cache_clear()

    def tokens(self, text: str) -> list[str]:
        """All content words in order, duplicates kept (for BM25 and mention checks)."""
        self.load()
        out: list[str] = []
        # NFKC for matching only: full-width "ＡＢＣ" and "ABC" are the same keyword.
        folded = unicodedata.normalize("NFKC", normalize_text(text)).lower()
        date = _LEADING_DATE.match(folded)
        for raw in self._tokenizer.lcut(folded[date.end():] if date else folded):
            word = raw.strip()
            if word not in self._stopwords:
                word = _QUESTION_HEAD.sub("", word)
            if self._is_content(word):
                out.append(word[:MAX_KEYWORD_CHARS])
        return out

    def keywords(self, text: str, limit: int = 12) -> list[str]:
        """Distinct content words, first occurrence first, at most ``limit``."""
        return list(self._cached(text)[:limit])

    def _keywords(self, text: str) -> tuple[str, ...]:
        # Every distinct word, cut once: a memory is asked for its keywords and its index terms.
        return tuple(dict.fromkeys(self.tokens(text)))

    def distinctive(self, word: str) -> bool:
        """Whether a content word is rare enough in general Chinese to name a topic by itself
        (``DISTINCTIVE_MAX_COUNT``). English words never are: the dictionary has no counts for them."""
        if not _CJK.search(word):
            return False
        self.load()
        # jieba's dictionary also holds phrases around function words, many of them rare ("我会" 1,196, "还行"
        # 3), and its HMM glues such words to names ("叫布玛"): a word holding one is no topic's name.
        if any(char in self._stopwords for char in word):
            return False
        frequencies = self._tokenizer.FREQ
        if frequencies.added_word(word):  # the user dictionary's life topics, the configured important keywords
            return True
        listed = frequencies.listing(word)
        if listed is None:  # a name jieba's HMM found
            return True
        count, tag = listed
        return count <= DISTINCTIVE_MAX_COUNT and tag not in _NOT_TOPICS

    def names_a_thing(self, word: str) -> bool:
        """Whether a content word names a thing or someone (a noun of at most ``THING_MAX_COUNT`` uses, or a name
        jieba's HMM found): "虾", "年糕", "芒果", not "准备", "算了" or "公司". What tells a new detail of a known
        topic apart from the everyday words around it."""
        if not _CJK.search(word):
            return False
        self.load()
        frequencies = self._tokenizer.FREQ
        if frequencies.added_word(word):
            return True
        listed = frequencies.listing(word)
        if listed is None:
            return True
        count, tag = listed
        return bool(count <= THING_MAX_COUNT and tag.startswith("n") and tag != "nt")

    def things(self, text: str) -> list[str]:
        """The content words of ``text`` that name a thing where they stand (``names_a_thing``, and not said
        of something after a degree adverb): the details a new fact brings ("对了我对虾也过敏": 虾)."""
        found = []
        for word in self.keywords(text):
            if not self.names_a_thing(word):
                continue
            at = text.find(word)
            if at >= 0 and _DEGREE.search(text[:at]):
                continue
            found.append(word)
        return found

    def _is_content(self, word: str) -> bool:
        if not word or word in self._stopwords or _DIGITS.match(word):
            return False
        if not _WORDISH.search(word):
            return False
        # One CJK character is too ambiguous to match on ("好", "病"); one Latin letter too.
        return len(word) >= 2
