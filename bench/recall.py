"""Replays a dataset through each system in file order and scores every query as it comes.

Three systems: the engine (``recall`` as the bot calls it, with the recent context a query carries; for
the ranking metrics the per-turn cap, importance floor, gate and cooldown are lifted), BM25 over
jieba words (the baseline) and the character index alone (BM25 over the engine's character units).
Negative turns (``relevant: []``) are scored only for the false-injection rate, never for hit@k.

False injection: how often the bot, with its real gate, per-turn limit and importance floor, injects
anything on a turn no stored memory is relevant to. Two kinds of such turns: the dataset's own negative
turns (DuLeMon's utterances the bot answered without a persona) and every question asked of a
*different* user's memories (from half the list away on, the first user sharing no memory text with the
asker: see ``partners``). Each kind also has a subset of negatives that are negatives by a rule read
from the data set alone: chit-chat the data set does not annotate as the user stating a stored fact
(``about``), and other-user turns whose other scope neither names the question's own thing
(``names_the_same_thing``) nor holds a memory sharing a subject with it (``subjects``, from the data
set's schema; a data set that annotates subjects certifies only the questions it found one for). The
same replay also counts how often the gated bot injects a gold memory on a positive turn ("gated hit"),
the price the gate exacts.
"""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.bm25 import ScopedBM25
from bench.dataset import DatasetLine, MemoryLine, QueryLine
from bench.metrics import CHAT_CLEAN, OTHER_APART, OTHER_CLEAN, InjectionCounts, MetricsAccumulator, Summary
from companion.config.settings import Settings
from companion.core.models import MemoryDraft, Scope, Validity
from companion.ops.engine_assembly import open_engine
from companion.recall.chars import units
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

# A dataset memory without importance must still be recallable by the bot (its floor is 50).
DEFAULT_IMPORTANCE = 60
# Datasets rarely say how long a fact stays true; LoCoMo's turns are months older than its questions,
# and the engine skips expired memories, so an unlabelled memory is kept for good.
DEFAULT_VALIDITY = Validity.PERMANENT


def run_bm25(lines: Iterable[DatasetLine], ks: Sequence[int],
             extractor: KeywordExtractor) -> MetricsAccumulator:
    """BM25 over ``extractor.tokens``; latency covers query tokenisation plus search, as the engine's will."""
    return _run_bm25(lines, ks, extractor.tokens)


def run_chars(lines: Iterable[DatasetLine], ks: Sequence[int]) -> MetricsAccumulator:
    """The engine's character index alone: BM25 over character unigrams and bigrams (Latin words for
    English), the current turn as the query."""
    return _run_bm25(lines, ks, _unit_tokens)


def _unit_tokens(text: str) -> list[str]:
    return list(units(text))


def _run_bm25(lines: Iterable[DatasetLine], ks: Sequence[int],
              tokens: Callable[[str], list[str]]) -> MetricsAccumulator:
    index = ScopedBM25()
    results = MetricsAccumulator(ks)
    for line in lines:
        if isinstance(line, MemoryLine):
            index.add(line.user, line.id, tokens(line.text))
            continue
        if line.negative:
            continue
        started = time.perf_counter()
        hits = index.search(line.user, tokens(line.text), results.depth)
        elapsed_ms = (time.perf_counter() - started) * 1000
        results.add(line.id, [doc_id for doc_id, _ in hits], line.relevant, elapsed_ms)
    return results


def group_of(query: QueryLine) -> str:
    """The subset a query belongs to, for per-subset tables: LoCoMo's category (from its query id),
    otherwise the user's source prefix (a MemDaily file, "dulemon")."""
    _, _, tail = query.id.rpartition(":")
    return tail if tail.startswith("cat") else query.user.rpartition(":")[0] or query.user


def breakdown(lines: Iterable[DatasetLine], systems: Mapping[str, MetricsAccumulator],
              ks: Sequence[int]) -> dict[str, dict[str, Summary]]:
    """Per-subset summaries of each system; results are matched to queries by file order."""
    queries = [line for line in lines if isinstance(line, QueryLine) and not line.negative]
    out: dict[str, dict[str, Summary]] = {}
    for name, results in systems.items():
        groups: dict[str, MetricsAccumulator] = {}
        for query, result in zip(queries, results.results, strict=True):
            acc = groups.setdefault(group_of(query), MetricsAccumulator(ks))
            acc.add(result.query_id, result.ranked_ids, result.relevant, result.latency_ms)
        for group, acc in groups.items():
            out.setdefault(group, {})[name] = {"queries": acc.count, **acc.summary()}
    return dict(sorted(out.items()))


def draft_for(line: MemoryLine) -> MemoryDraft:
    """The dataset memory as the engine would receive it. Keywords left empty get the engine's own."""
    return MemoryDraft(
        event=line.text,
        keywords=list(line.keywords or ()),
        importance=DEFAULT_IMPORTANCE if line.importance is None else line.importance,
        validity=DEFAULT_VALIDITY if line.validity is None else Validity(line.validity),
        created_at=line.time,
    )


class _RowMap:
    """Engine row ids -> dataset ids. The engine merges a retold event into its earlier row, so one row
    can stand for several dataset memories; they are expanded in the order they were written."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], list[str]] = {}

    def add(self, scope: int, row: int, dataset_id: str) -> None:
        self.rows.setdefault((scope, row), []).append(dataset_id)

    def expand(self, scope: int, rows: Iterable[int], depth: int) -> list[str]:
        out: list[str] = []
        for row in rows:
            out.extend(self.rows.get((scope, row), ()))
            if len(out) >= depth:
                break
        return out[:depth]


async def run_engine(lines: Iterable[DatasetLine], ks: Sequence[int], *, data_dir: Path | None = None,
                     notes: Counter[str] | None = None, injections: InjectionCounts | None = None,
                     min_match: float | None = None, newest_only: int | None = None) -> MetricsAccumulator:
    """The memory engine on the same lines: each memory goes through ``remember`` (the write path the
    bot's extraction uses), each query through ``recall`` at the query's time with the per-turn cap,
    the importance floor, the gate and the cooldown lifted. ``notes`` collects write statistics
    (merges); ``injections`` the bot's gated behaviour on positive, negative and other-user turns.
    ``min_match`` overrides the configured gate (for calibration). ``newest_only``: the bot's gated
    recall may pick only among each scope's N newest rows, as a tier filter that let a reply recall only
    the 2 newest short-term memories did for extracted ones (the comparison in docs/benchmarks-history.md §1b)."""
    notes = Counter() if notes is None else notes
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as tmp:
        settings = Settings(_env_file=None, data_dir=data_dir or Path(tmp))  # type: ignore[call-arg]
        if min_match is not None:
            settings = settings.model_copy(update={"recall_min_match": min_match})
        engine = await open_engine(settings, KeywordExtractor())
        try:
            return await _replay(engine, lines, ks, notes, injections, newest_only)
        finally:
            await engine.close()


async def _recall(engine: MemoryEngine, scope: Scope, line: QueryLine, *, bot: bool,
                  allowed: Collection[int] | None = None) -> list[int]:
    """Row ids the engine recalls for the query: as the bot would inject them (among ``allowed`` rows
    only, when given), or the whole ranking."""
    if bot:
        recalled = await engine.recall(scope, line.text, line.time, cooldown=None, earlier=line.context,
                                       reply=line.reply, allowed=allowed)
    else:
        recalled = await engine.recall(scope, line.text, line.time, limit=None, min_importance=0.0,
                                       min_match=0.0, cooldown=None, earlier=line.context, reply=line.reply)
    return [r.memory.id for r in recalled]


async def _replay(engine: MemoryEngine, lines: Iterable[DatasetLine], ks: Sequence[int],
                  notes: Counter[str], injections: InjectionCounts | None,
                  newest_only: int | None = None) -> MetricsAccumulator:
    scopes: dict[str, int] = {}
    rows = _RowMap()
    newest: dict[int, dict[int, None]] = {}  # per scope, rows in the order last written

    def allowed(number: int) -> list[int] | None:
        return None if newest_only is None else list(newest.get(number, {}))[-newest_only:]

    results = MetricsAccumulator(ks)
    questions: list[QueryLine] = []
    texts: dict[str, set[str]] = {}
    subjects: dict[str, set[str]] = {}
    by_id: dict[tuple[str, str], str] = {}
    for line in lines:
        number = scopes.setdefault(line.user, len(scopes) + 1)
        scope = Scope(number)
        if isinstance(line, MemoryLine):
            texts.setdefault(line.user, set()).add(line.text)
            subjects.setdefault(line.user, set()).update(line.subjects)
            by_id[(line.user, line.id)] = line.text
            written = await engine.remember(scope, [draft_for(line)], now=line.time)
            notes["memories"] += 1
            if not written:
                notes["memories the engine dropped"] += 1
            for row in written[:1]:  # one draft writes or merges into exactly one row
                rows.add(number, row, line.id)
                order = newest.setdefault(number, {})
                order.pop(row, None)
                order[row] = None
            continue
        if injections is not None:
            injected = rows.expand(number, await _recall(engine, scope, line, bot=True, allowed=allowed(number)),
                                   10**6)
            injections.add("negative" if line.negative else "positive", injected, line.relevant)
            if line.negative and not line.about:
                injections.add(CHAT_CLEAN, injected, ())
        if line.negative:
            continue
        questions.append(line)
        started = time.perf_counter()
        recalled = await _recall(engine, scope, line, bot=False)
        elapsed_ms = (time.perf_counter() - started) * 1000
        results.add(line.id, rows.expand(number, recalled, results.depth), line.relevant, elapsed_ms)
    notes["engine rows"] = len(rows.rows)
    notes["memories merged into an earlier row"] = notes["memories"] - len(rows.rows)
    if injections is not None:
        partner = partners(list(scopes), texts)

        annotated = any(line.subjects for line in questions)

        def named_there(line: QueryLine) -> bool:
            gold = [by_id[(line.user, r)] for r in line.relevant if (line.user, r) in by_id]
            return names_the_same_thing(line.text, gold, texts.get(partner[line.user], ()))

        def subject_there(line: QueryLine) -> bool:
            return shares_subject(line.subjects, subjects.get(partner[line.user], set()), annotated)

        await _other_user_turns(engine, scopes, questions, injections, partner, named_there, subject_there,
                                allowed)
    return results


# A memory text this share of the users hold (at least PADDING_MIN_USERS) is padding (distractors), not a
# sign of the same person.
PADDING_SHARE = 0.01
PADDING_MIN_USERS = 3


def partners(users: Sequence[str], texts: Mapping[str, set[str]]) -> dict[str, str]:
    """Whose memories each user's questions are asked of for the other-user turns: the first user from half
    the list away on who shares no memory text with the asker. Synthetic sets build several users from one
    persona (MemDaily's files come in aligned blocks: "01_simple_events:0" and "04_aggregative_events:0"
    hold the same events), so the user half the list away may be the same person, whose memories *are*
    relevant. Texts many users hold (distractor padding) do not count. A user no one else qualifies for
    keeps the one half the list away."""
    if len(users) < 2:
        return {}
    held: dict[str, int] = {}
    for user in users:
        for text in texts.get(user, ()):
            held[text] = held.get(text, 0) + 1
    padding = max(PADDING_MIN_USERS, int(len(users) * PADDING_SHARE))
    own = {u: {t for t in texts.get(u, ()) if held[t] < padding} for u in users}
    out: dict[str, str] = {}
    for i, user in enumerate(users):
        start = i + len(users) // 2
        ring = [users[(start + step) % len(users)] for step in range(len(users))]
        others = (c for c in ring if c != user and not own[user] & own[c])
        out[user] = next(others, users[start % len(users)] if users[start % len(users)] != user else ring[1])
    return out


# Chinese names of events, places and people run to four characters and more ("金融科技精英论坛").
NAME_CHARS = 4
_CJK_RUN = re.compile(r"[\u3400-\u9fff]+")


def _names(text: str) -> set[str]:
    return {run[i : i + NAME_CHARS] for run in _CJK_RUN.findall(text) for i in range(len(run) - NAME_CHARS + 1)}


def names_the_same_thing(question: str, gold: Iterable[str], other: Iterable[str]) -> bool:
    """The other user's memories name what the question names in its own gold memories (a string of at
    least four Chinese characters in all three): the same event or person, as synthetic sets reuse them
    across users, so a memory there may well be relevant and its injection is not clearly false."""
    asked = _names(question)
    named = {n for n in asked if any(n in _names(t) for t in gold)}
    return bool(named) and any(named & _names(t) for t in other)


def certified_negative(line: QueryLine, gold: Iterable[str], other_texts: Iterable[str], other_subjects: Iterable[str],
                       annotated: bool) -> bool:
    """A question asked of another user's memories that the data set itself vouches has nothing relevant
    there: the other scope neither names the question's own thing nor shares one of its subjects."""
    return not names_the_same_thing(line.text, gold, other_texts) and not shares_subject(
        line.subjects, other_subjects, annotated)


def shares_subject(asked: Iterable[str], there: Iterable[str], annotated: bool) -> bool:
    """Whether the other scope may hold a memory about what the question asks: it shares one of the
    question's subjects, or the data set annotates subjects (``annotated``) and found none for this question,
    so it cannot certify the turn as a negative."""
    asked = set(asked)
    return bool(asked & set(there)) if asked else annotated


async def _other_user_turns(engine: MemoryEngine, scopes: Mapping[str, int], questions: Sequence[QueryLine],
                            injections: InjectionCounts, partner: Mapping[str, str],
                            named_there: Callable[[QueryLine], bool],
                            subject_there: Callable[[QueryLine], bool] | None = None,
                            allowed: Callable[[int], list[int] | None] = lambda number: None) -> None:
    """Each question asked of the memories of a different user (``partners``): nothing there is relevant.
    The turns whose other scope does not name the question's own thing are also counted on their own
    (``OTHER_APART``), and those that moreover share no subject with it (``OTHER_CLEAN``): the negatives
    certified by the data set."""
    if not partner:
        return
    for line in questions:
        other = partner[line.user]
        injected = await _recall(engine, Scope(scopes[other]), line, bot=True, allowed=allowed(scopes[other]))
        rows = [str(row) for row in injected]
        injections.add("other user", rows, ())
        if not named_there(line):
            injections.add(OTHER_APART, rows, ())
            if subject_there is None or not subject_there(line):
                injections.add(OTHER_CLEAN, rows, ())


LATENCY_NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
LATENCY_BATCH = 500


async def run_latency(sizes: Sequence[int], turns: int, seed: int) -> dict[str, Any]:
    """Per-turn recall as the bot calls it (the turn plus its two earlier turns and the last reply,
    the bot's gate and limit) for one user holding each number of synthetic memories; warm index."""
    from bench import synth
    from bench.timing import latency_summary, machine

    rng = random.Random(seed)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        settings = Settings(_env_file=None, data_dir=Path(tmp))  # type: ignore[call-arg]
        engine = await open_engine(settings, KeywordExtractor())
        try:
            for number, size in enumerate(sizes, start=1):
                scope = Scope(number)
                drafts = synth.memories(rng, size, LATENCY_NOW)
                for start in range(0, size, LATENCY_BATCH):
                    await engine.remember(scope, drafts[start : start + LATENCY_BATCH], LATENCY_NOW)
                messages = [synth.message(rng) for _ in range(turns + 2)]
                await engine.recall(scope, messages[0], LATENCY_NOW)  # loads the index: the cold turn
                samples: list[float] = []
                cpu: list[float] = []
                recalled = 0
                for n in range(2, turns + 2):
                    started, cpu_started = time.perf_counter(), time.process_time()
                    found = await engine.recall(scope, messages[n], LATENCY_NOW, cooldown=None,
                                                earlier=messages[n - 2 : n], reply="那你要好好休息哦")
                    samples.append((time.perf_counter() - started) * 1000)
                    cpu.append((time.process_time() - cpu_started) * 1000)
                    recalled += len(found)
                # CPU time next to wall time: on a shared machine the wall clock also counts waiting for a core.
                out[str(size)] = {**latency_summary(samples), "cpu": latency_summary(cpu),
                                  "recalled_per_turn": round(recalled / turns, 3)}
        finally:
            await engine.close()
    return {"sizes": out, "machine": machine()}
