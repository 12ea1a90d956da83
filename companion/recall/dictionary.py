"""jieba's word dictionary held compactly: the same segmentation in ~3 MB instead of ~60 MB.

jieba keeps its 349,046 words and every prefix of them as one Python dict of 498,113 strings (62 MB of
the bot's memory, more than its SQLite schema at 10,000 users). ``CompactTokenizer`` is jieba's own
``Tokenizer`` with that dict replaced by a marisa trie of the words and an array of their frequencies:
``get_DAG`` asks the trie for every dictionary word that starts at each position (one call instead of a
dict lookup per prefix), ``calc`` reads the frequencies from the array, and everything else (the HMM for
unknown words, user words, ``add_word``) is jieba's code unchanged. Words added at run time (the shipped
user dictionary, configured keywords) live in a small dict beside the trie and win over it, as they win
in jieba's dict. ``tests/test_dictionary.py`` checks that the cuts equal jieba's on real dialogue.

The trie is built from jieba's ``dict.txt`` once (~1 s) and cached in the temporary directory, as jieba
caches its own dict there; later starts load it in milliseconds. Each word's part-of-speech tag is kept
beside its frequency (one byte a word, 0.35 MB): recall asks whether a rare word can name a topic.
"""

from __future__ import annotations

import array
import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from math import log
from pathlib import Path
from typing import Any

import jieba
import marisa_trie

log_ = logging.getLogger(__name__)

FORMAT = 2  # bump when the cached files' layout changes
STARTS_CACHE = 50_000
_FREQ_TYPE = "I"  # jieba's frequencies are below 2**32 (the largest is 884,635)
# dict.txt's part-of-speech tags, stored as their index here (one byte a word); a tag not listed reads "".
# Append only: the cache holds indexes.
TAGS = ("", "n", "nr", "v", "i", "l", "ns", "m", "nz", "nrt", "zg", "nt", "a", "vn", "z", "d", "t", "j", "b", "g",
        "r", "s", "c", "nrfg", "x", "f", "ng", "o", "q", "vg", "p", "ad", "mq", "y", "ag", "an", "e", "u", "tg", "vq",
        "vi", "k", "vd", "rr", "mg", "h", "dg", "uz", "uv", "ul", "uj", "ug", "ud", "rz", "rg", "df")
_TAG_INDEX = {tag: index for index, tag in enumerate(TAGS)}


class _Frequencies:
    """What jieba's code reads from ``Tokenizer.FREQ``: ``get`` (a word's frequency), ``in`` (the text is
    a word or the prefix of one: jieba's prefix walk) and assignment (``add_word``)."""

    def __init__(self, trie: marisa_trie.Trie, counts: array.array[int], tags: array.array[int]) -> None:
        self.trie = trie
        self.counts = counts
        self.tags = tags
        self.added: dict[str, int] = {}  # words set at run time, 0 = deleted (or a bare prefix)
        self.added_prefixes: set[str] = set()  # every prefix of an added word, for the DAG walk
        # What the trie says of the text read at a position: the words it starts with and whether longer
        # words start with it. A dict lookup is ~20x cheaper than a trie call (~1 us) and text repeats
        # its heads (two or three characters) far more than its words; bounded, as text brings new ones.
        self.starts: dict[str, tuple[tuple[tuple[int, int], ...], bool]] = {}

    def prefixes(self, text: str) -> tuple[tuple[int, int], ...]:
        """(length, frequency) of every dictionary word that ``text`` starts with, shortest first."""
        counts = self.counts
        return tuple((len(word), counts[index]) for word, index in self.trie.iter_prefixes_with_ids(text))

    def words_starting(self, head: str) -> tuple[tuple[tuple[int, int], ...], bool]:
        longer = False
        for word in self.trie.iterkeys(head):
            if len(word) > len(head):
                longer = True
                break
        known = (self.prefixes(head), longer)
        if len(self.starts) >= STARTS_CACHE:
            self.starts.clear()
        self.starts[head] = known
        return known

    def get(self, word: str, default: int | None = None) -> int | None:
        found = self.added.get(word)
        if found is not None:
            return found
        index = self.trie.get(word)
        return self.counts[index] if index is not None else default

    def added_word(self, word: str) -> bool:
        """Whether the word was added at run time (the user dictionary, ``add_word``), not a bare prefix."""
        return bool(self.added.get(word))

    def listing(self, word: str) -> tuple[int, str] | None:
        """The count and part of speech jieba's dictionary lists for the word (one trie lookup); None for a
        word it does not list."""
        index = self.trie.get(word)
        return (self.counts[index], TAGS[self.tags[index]]) if index is not None else None

    def __getitem__(self, word: str) -> int:
        found = self.get(word)
        if found is None:
            if word in self:
                return 0  # a prefix of a word, as jieba's dict holds it
            raise KeyError(word)
        return found

    def __contains__(self, text: object) -> bool:
        if not isinstance(text, str):
            return False
        return text in self.added or text in self.added_prefixes or next(self.trie.iterkeys(text), None) is not None

    def __setitem__(self, word: str, freq: int) -> None:
        self.added[word] = freq
        self.added_prefixes.update(word[: n + 1] for n in range(len(word)))


class CompactTokenizer(jieba.Tokenizer):  # type: ignore[misc]  # jieba ships no types
    """``jieba.Tokenizer`` over the compact dictionary; cuts exactly as jieba's default dictionary does."""

    initialized: bool  # jieba's attributes, set by its ``__init__``
    total: int
    FREQ: Any

    def __init__(self, cache_dir: Path | None = None) -> None:
        super().__init__()
        self._cache_dir = cache_dir

    def initialize(self, dictionary: str | None = None) -> None:
        if dictionary:
            raise ValueError("CompactTokenizer reads jieba's default dictionary only")
        with self.lock:
            if self.initialized:
                return
            trie, counts, total, tags = load_dictionary(self._cache_dir)
            self.FREQ = _Frequencies(trie, counts, tags)
            self.total = total
            self.initialized = True

    def get_DAG(self, sentence: str) -> _Dag:  # jieba's name
        self.check_initialized()
        freq: _Frequencies = self.FREQ
        added = freq.added
        added_heads = freq.added_prefixes
        starts = freq.starts
        size = len(sentence)
        dag = _Dag()
        logs = dag.logs = {}
        for k in range(size):
            # jieba's walk, one character further while longer words start with what was read.
            reach = k + 2
            while True:
                head = sentence[k:reach]
                known = starts.get(head)
                if known is None:
                    known = freq.words_starting(head)
                matches, longer = known
                if not longer or reach >= size:
                    break
                reach += 1
            ends: list[int] = []
            for length, count in matches:
                if added:
                    count = added.get(sentence[k : k + length], count)
                if count:  # a word deleted at run time is no word
                    end = k + length - 1
                    ends.append(end)
                    logs[k * size + end] = log(count)
            if sentence[k] in added_heads:  # an added word starts here (the trie's ends are in order)
                ends = self._added_ends(sentence, k, ends, logs)
            dag[k] = ends or [k]
        return dag

    def _added_ends(self, sentence: str, k: int, ends: list[int], logs: dict[int, float]) -> list[int]:
        """jieba's own prefix walk over the words added at run time, merged into the trie's ends."""
        freq: _Frequencies = self.FREQ
        found = set(ends)
        size = len(sentence)
        i = k
        fragment = sentence[k]
        while i < size and fragment in freq.added_prefixes:
            count = freq.added.get(fragment)
            if count:
                found.add(i)
                logs[k * size + i] = log(count)
            i += 1
            fragment = sentence[k : i + 1]
        return sorted(found)

    def calc(self, sentence: str, dag: dict[int, list[int]], route: dict[int, tuple[float, int]]) -> None:
        logs = getattr(dag, "logs", None)
        if logs is None:  # a DAG built elsewhere
            super().calc(sentence, dag, route)
            return
        size = len(sentence)
        route[size] = (0, 0)
        logtotal = log(self.total)
        for idx in range(size - 1, -1, -1):
            base = idx * size
            ends = dag[idx]
            if len(ends) == 1:  # most positions: no generator and max() for one candidate
                x = ends[0]
                route[idx] = (logs.get(base + x, 0.0) - logtotal + route[x + 1][0], x)
            else:
                route[idx] = max((logs.get(base + x, 0.0) - logtotal + route[x + 1][0], x) for x in ends)


class _Dag(dict[int, list[int]]):
    """jieba's DAG (start -> possible word ends) with the log frequency of each edge, so ``calc`` needs
    no second dictionary lookup per edge."""

    __slots__ = ("logs",)
    logs: dict[int, float]


def _dict_path() -> Path:
    return Path(jieba.__file__).with_name(jieba.DEFAULT_DICT_NAME)


def _cache_paths(cache_dir: Path | None, source: Path) -> tuple[Path, Path, Path]:
    stat = source.stat()
    key = f"{FORMAT}:{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    folder = cache_dir or Path(tempfile.gettempdir())
    name = f"companion-jieba-{digest}"
    return folder / f"{name}.trie", folder / f"{name}.freq", folder / f"{name}.tags"


def _entries(source: Path) -> Iterator[tuple[str, int, str]]:
    with source.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            parts = line.strip().split(" ")
            try:
                yield parts[0], int(parts[1]), parts[2] if len(parts) > 2 else ""
            except (IndexError, ValueError):
                raise ValueError(f"invalid dictionary entry in {source} at line {number}") from None


Dictionary = tuple[marisa_trie.Trie, "array.array[int]", int, "array.array[int]"]


def build_dictionary(source: Path) -> Dictionary:
    """The trie of ``source``'s words, their frequencies by trie index, the total, as jieba counts them (a word
    listed twice keeps its last frequency; the total counts both), and their tags (``TAGS`` indexes)."""
    trie = marisa_trie.Trie(word for word, _, _ in _entries(source))
    counts = array.array(_FREQ_TYPE, bytes(array.array(_FREQ_TYPE).itemsize * len(trie)))
    tags = array.array("B", bytes(len(trie)))
    total = 0
    for word, count, tag in _entries(source):
        index = trie[word]
        counts[index] = count
        tags[index] = _TAG_INDEX.get(tag, 0)
        total += count
    return trie, counts, total, tags


def load_dictionary(cache_dir: Path | None = None) -> Dictionary:
    """The compact dictionary from the cache, built (and cached) when the cache is missing or unreadable."""
    source = _dict_path()
    trie_path, freq_path, tags_path = _cache_paths(cache_dir, source)
    try:
        trie = marisa_trie.Trie()
        trie.load(str(trie_path))
        stored = freq_path.read_bytes()
        counts = array.array(_FREQ_TYPE)
        counts.frombytes(stored[8:])
        total = int.from_bytes(stored[:8], "little")
        tags = array.array("B", tags_path.read_bytes())
        if len(counts) == len(trie) == len(tags) and total > 0 and max(tags) < len(TAGS):
            return trie, counts, total, tags
    except (OSError, RuntimeError, ValueError):
        pass  # not cached yet, or cut short by another process: build it again
    trie, counts, total, tags = build_dictionary(source)
    try:
        _save(trie, counts, total, tags, (trie_path, freq_path, tags_path))
    except OSError as exc:  # an unwritable temp dir costs the next start a rebuild, nothing else
        log_.warning("cannot cache the word dictionary in %s: %s", trie_path.parent, exc.strerror or exc)
    return trie, counts, total, tags


def _save(trie: Any, counts: array.array[int], total: int, tags: array.array[int],
          paths: tuple[Path, Path, Path]) -> None:
    # Each file appears whole or not at all (another process may be loading it).
    suffix = f".{os.getpid()}.tmp"
    trie_path, freq_path, tags_path = paths
    trie.save(str(trie_path) + suffix)
    os.replace(str(trie_path) + suffix, trie_path)
    for path, data in ((freq_path, total.to_bytes(8, "little") + counts.tobytes()), (tags_path, tags.tobytes())):
        Path(str(path) + suffix).write_bytes(data)
        os.replace(str(path) + suffix, path)
