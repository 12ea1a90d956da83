"""LoCoMo (locomo10.json) -> dataset: one user scope per sample, all memories before its questions.

Query ids are ``q<index in qa>:cat<category>`` so results can be broken down by LoCoMo's categories
without extending the dataset format.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from bench.convert.common import ConvertStats
from bench.dataset import DatasetLine, MemoryLine, QueryLine

Mode = Literal["turns", "observations"]
ADVERSARIAL = 5
# Session stamps are start times; an hour later the last session is surely over.
QUERY_DELAY = timedelta(hours=1)
_ID_SPLIT = re.compile(r"[;\s,]+")
_NUMBER = re.compile(r"\d+")
_SESSION_KEY = re.compile(r"session_(\d+)")
_OBSERVATION_KEY = re.compile(r"session_(\d+)_observation")


def parse_locomo_time(text: str) -> datetime:
    """``1:56 pm on 8 May, 2023`` -> aware UTC datetime (LoCoMo gives no zone)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def clean_dia_ids(raw: Iterable[object], known: set[str]) -> tuple[list[str], int]:
    """Evidence/source ids split on ``[;\\s,]``, leading zeros stripped, unknown ids dropped.

    Returns the distinct valid ids in order and how many pieces were dropped.
    """
    valid: dict[str, None] = {}
    dropped = 0
    for item in raw:
        for piece in _ID_SPLIT.split(str(item)):
            if not piece:
                continue
            norm = _NUMBER.sub(lambda m: str(int(m.group())), piece)
            if norm in known:
                valid.setdefault(norm, None)
            else:
                dropped += 1
    return list(valid), dropped


@dataclass(frozen=True, slots=True)
class _Session:
    number: int
    time: datetime
    turns: list[dict[str, Any]]


def _sessions(conversation: dict[str, Any], stats: ConvertStats) -> list[_Session]:
    out = []
    for key, turns in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if match and turns:
            out.append(_Session(int(match[1]), parse_locomo_time(conversation[f"{key}_date_time"]), turns))
    stamps = sum(1 for key in conversation if key.endswith("_date_time"))
    # conv-26 lists dates for sessions that have no turns at all.
    stats.note("session dates without turns (skipped)", stamps - len(out))
    return sorted(out, key=lambda s: s.number)


def _turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [shared a photo: {caption}]" if caption else text


def _turn_memories(user: str, sessions: list[_Session]) -> list[MemoryLine]:
    return [MemoryLine(user, turn["dia_id"], s.time, _turn_text(turn)) for s in sessions for turn in s.turns]


def _observation_memories(user: str, sample: dict[str, Any], sessions: list[_Session], known: set[str],
                          stats: ConvertStats) -> tuple[list[MemoryLine], dict[str, list[str]]]:
    """Observation memories, plus for each dialog id the observations extracted from it."""
    times = {s.number: s.time for s in sessions}
    keyed: list[tuple[tuple[int, int], MemoryLine]] = []
    by_source: dict[str, list[str]] = {}
    used: Counter[str] = Counter()
    for key, per_speaker in sample.get("observation", {}).items():
        match = _OBSERVATION_KEY.fullmatch(key)
        if not match or int(match[1]) not in times:
            stats.note("observation sessions without turns (skipped)")
            continue
        number = int(match[1])
        for fact_text, raw_source in (fact for facts in per_speaker.values() for fact in facts):
            sources, bad = clean_dia_ids(raw_source if isinstance(raw_source, list) else [raw_source], known)
            stats.note("observation source ids dropped", bad)
            anchor = sources[0] if sources else f"D{number}:?"
            ident = f"obs:{anchor}#{used[anchor]}"
            used[anchor] += 1
            # Sorted by source turn so facts come in conversation order, not grouped by speaker.
            turn = int(anchor.split(":")[1]) if sources else 10**9
            keyed.append(((number, turn), MemoryLine(user, ident, times[number], fact_text)))
            for source in sources:
                by_source.setdefault(source, []).append(ident)
    keyed.sort(key=lambda pair: pair[0])
    return [memory for _, memory in keyed], by_source


def _queries(user: str, sample: dict[str, Any], known: set[str], when: datetime,
             relevant_for: dict[str, list[str]] | None, stats: ConvertStats) -> Iterator[QueryLine]:
    for index, qa in enumerate(sample["qa"]):
        category = qa.get("category")
        if category == ADVERSARIAL:
            stats.drop("adversarial (category 5)")
            continue
        evidence, bad = clean_dia_ids(qa.get("evidence") or [], known)
        stats.note("evidence ids dropped (malformed or nonexistent)", bad)
        if not evidence:
            stats.drop("no valid evidence")
            continue
        relevant = evidence
        if relevant_for is not None:
            relevant = list(dict.fromkeys(obs for dia in evidence for obs in relevant_for.get(dia, [])))
            if not relevant:
                stats.drop("no observation extracted from its evidence")
                continue
        yield QueryLine(user, f"q{index}:cat{category}", when, str(qa["question"]), tuple(relevant))


def convert_sample(sample: dict[str, Any], mode: Mode, stats: ConvertStats) -> Iterator[DatasetLine]:
    user = str(sample["sample_id"])
    sessions = _sessions(sample["conversation"], stats)
    if not sessions:
        stats.note("samples without turns (skipped)")
        return
    known = {turn["dia_id"] for s in sessions for turn in s.turns}
    when = sessions[-1].time + QUERY_DELAY
    if mode == "turns":
        yield from _turn_memories(user, sessions)
        yield from _queries(user, sample, known, when, None, stats)
        return
    memories, by_source = _observation_memories(user, sample, sessions, known, stats)
    yield from memories
    yield from _queries(user, sample, known, when, by_source, stats)


def convert_locomo(src: Path, mode: Mode, stats: ConvertStats,
                   limit: int | None = None) -> Iterator[DatasetLine]:
    samples = json.loads(src.read_text(encoding="utf-8"))
    if not isinstance(samples, list):
        raise ValueError(f"{src}: expected a JSON list of samples")
    for sample in samples[:limit]:
        yield from convert_sample(sample, mode, stats)
