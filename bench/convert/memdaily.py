"""MemDaily (messages_and_QAs/*.json) -> dataset: one user scope per trajectory, padded with distractors.

Each trajectory's messages are its memories (``<tid>:<mid>``); its question is a query whose gold is
``target_step_id``. Distractors (``d:<n>``) are merged in by time so that neither recency nor file
position gives the real messages away. When the data set's schema (``meta_profile.csv``) sits beside the
messages, every memory and question also carries its ``subjects`` (``bench.convert.subjects``).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.convert.common import ConvertStats
from bench.convert.distractors import DistractorPool
from bench.convert.dulemon import read_sessions, session_sentences
from bench.convert.subjects import Schema
from bench.dataset import DEFAULT_TZ, DatasetLine, MemoryLine, QueryLine

_TIME = re.compile(r"\s*(\d{4})年(\d{1,2})月(\d{1,2})日(?:\s*周.)?\s*(\d{1,2}):(\d{2})\s*")
QUERY_DELAY = timedelta(minutes=1)
# Distractors start this long before the first message, so some are older than every real memory.
DISTRACTOR_LEAD = timedelta(days=7)


def parse_memdaily_time(text: str) -> datetime:
    """``2024年04月01日 周一 08:39`` -> aware datetime in Asia/Shanghai."""
    match = _TIME.fullmatch(text)
    if not match:
        raise ValueError(f"unrecognised MemDaily time {text!r}")
    year, month, day, hour, minute = (int(part) for part in match.groups())
    return datetime(year, month, day, hour, minute, tzinfo=DEFAULT_TZ)


def find_dulemon(src: Path) -> Path | None:
    """The shared layout keeps dulemon/ beside memdaily/: look a few levels up from SRC."""
    for parent in list(src.resolve().parents)[:3]:
        candidate = parent / "dulemon" / "samples.json"
        if candidate.is_file():
            return candidate
    return None


def build_pool(dulemon: Path | None, stats: ConvertStats) -> DistractorPool:
    sessions = read_sessions(dulemon) if dulemon else []
    sentences = [sentence for session in sessions for sentence in session_sentences(session)]
    pool = DistractorPool(sentences)
    stats.note("distractor pool size", len(pool.sentences))
    stats.note("distractor candidates rejected (MemDaily subjects or too short)", pool.rejected)
    return pool


def source_files(src: Path, pattern: str) -> list[Path]:
    files = [src] if src.is_file() else sorted(src.glob(pattern))
    if not files:
        raise ValueError(f"no MemDaily files match {pattern!r} in {src}")
    return files


def _distractors(user: str, count: int, start: datetime, end: datetime, avoid: list[str],
                 pool: DistractorPool, seed: int) -> list[MemoryLine]:
    # One RNG per scope, seeded by its name, so --limit and --files do not change other scopes.
    rng = random.Random(f"{seed}:{user}")
    span = max((end - start).total_seconds(), 60.0)
    texts = pool.sample(count, rng, avoid)
    times = sorted(start + timedelta(seconds=int(rng.uniform(0, span))) for _ in texts)
    pairs = zip(times, texts, strict=True)
    return [MemoryLine(user, f"d:{n}", when, text) for n, (when, text) in enumerate(pairs)]


def _interleave(messages: list[MemoryLine], distractors: list[MemoryLine]) -> Iterator[MemoryLine]:
    """Messages keep their order (some trajectories are not in time order); distractors slot in by time."""
    pending = iter(distractors)
    upcoming = next(pending, None)
    for message in messages:
        while upcoming is not None and upcoming.time <= message.time:
            yield upcoming
            upcoming = next(pending, None)
        yield message
    if upcoming is not None:
        yield upcoming
    yield from pending


def _with_subjects(line: MemoryLine, schema: Schema | None) -> MemoryLine:
    return replace(line, subjects=tuple(sorted(schema.subjects(line.text)))) if schema else line


def _query(stem: str, trajectory: dict[str, Any], question: dict[str, Any], messages: list[MemoryLine],
           stats: ConvertStats, schema: Schema | None = None) -> QueryLine | None:
    tid = trajectory["tid"]
    known = {m.id for m in messages}
    targets = list(dict.fromkeys(f"{tid}:{mid}" for mid in question.get("target_step_id") or []))
    relevant = [rid for rid in targets if rid in known]
    stats.note("target ids naming no message (dropped)", len(targets) - len(relevant))
    if not relevant:
        stats.drop("no target message")
        return None
    after_last = max(m.time for m in messages) + QUERY_DELAY
    when = parse_memdaily_time(question["time"]) if question.get("time") else after_last
    if when < after_last:
        # A few questions are stamped before their trajectory's last message; a query must not predate
        # memories it is allowed to see.
        stats.note("question times moved after the last message", 1)
        when = after_last
    user = f"{stem}:{tid}"
    subjects: tuple[str, ...] = ()
    if schema:
        subjects = tuple(sorted(schema.of_question(m.text for m in messages if m.id in relevant)))
        stats.note("questions with a schema subject", bool(subjects))
    return QueryLine(user, f"{tid}:q{question['qid']}", when, question["question"], tuple(relevant),
                     subjects=subjects)


def convert_trajectory(stem: str, trajectory: dict[str, Any], pool: DistractorPool, min_candidates: int,
                       seed: int, stats: ConvertStats, schema: Schema | None = None) -> Iterator[DatasetLine]:
    tid = trajectory["tid"]
    user = f"{stem}:{tid}"
    messages = [_with_subjects(MemoryLine(user, f"{tid}:{m['mid']}", parse_memdaily_time(m["time"]), m["message"]),
                               schema) for m in trajectory["message_list"]]
    if not messages:
        stats.drop("trajectory without messages", len(trajectory.get("question_list", [])))
        return
    queries = [q for q in (_query(stem, trajectory, question, messages, stats, schema)
                           for question in trajectory.get("question_list", [])) if q is not None]
    if not queries:
        return
    first_query = min(q.time for q in queries)
    need = max(0, min_candidates - len(messages))
    start = min(m.time for m in messages) - DISTRACTOR_LEAD
    distractors = [_with_subjects(d, schema) for d in _distractors(
        user, need, start, first_query - QUERY_DELAY, [m.text for m in messages], pool, seed)]
    stats.note("distractors added", len(distractors))
    yield from _interleave(messages, distractors)
    yield from sorted(queries, key=lambda q: q.time)


def convert_memdaily(src: Path, stats: ConvertStats, *, min_candidates: int = 100, seed: int = 7,
                     limit: int | None = None, pattern: str = "*.json",
                     dulemon: Path | None = None) -> Iterator[DatasetLine]:
    pool = build_pool(dulemon, stats)
    schema = Schema.find(src)
    stats.note("schema (meta_profile.csv) found", schema is not None)
    for path in source_files(src, pattern):
        trajectories = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(trajectories, list):
            raise ValueError(f"{path}: expected a JSON list of trajectories")
        for trajectory in trajectories[:limit]:
            yield from convert_trajectory(path.stem, trajectory, pool, min_candidates, seed, stats, schema)
