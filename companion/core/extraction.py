"""Turning the model's extraction JSON into validated drafts, and merging drafts with what is stored.

Pure functions: no database, no clock. Anything that is not the documented shape is an error, never
"nothing to remember", so the caller keeps the turns queued and tries again later.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from functools import lru_cache
from itertools import chain
from typing import TypeVar

from companion.core import dates, rules
from companion.core.errors import LLMBadResponseError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Validity, When
from companion.core.sameness import difference
from companion.core.text import normalize_keyword, normalize_text

MAX_EVENT_CHARS = 50
MAX_KEYWORDS = 8
MAX_ITEMS = 20
DEFAULT_IMPORTANCE = 50.0
DUPLICATE_KEYWORD_OVERLAP = 0.6
_DATE_PREFIX = re.compile(r"^\s*\d{4}-\d{1,2}-\d{1,2}\s*")
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)
_VALIDITY_ALIASES = {
    "permanent": Validity.PERMANENT, "forever": Validity.PERMANENT, "永久": Validity.PERMANENT,
    "30d": Validity.DAYS_30, "30": Validity.DAYS_30, "30天": Validity.DAYS_30,
    "7d": Validity.DAYS_7, "7": Validity.DAYS_7, "7天": Validity.DAYS_7,
}

Segmenter = Callable[[str], list[str]]
E = TypeVar("E", MemoryType, Validity)


def parse_extraction(raw: str | dict[str, object], segment: Segmenter, today: str) -> list[MemoryDraft]:
    """Validate the model's answer. Raises LLMBadResponseError for anything but ``{"memories": [...]}``;
    inside the list, items that cannot be repaired are dropped one by one."""
    data = _load_object(raw) if isinstance(raw, str) else raw
    if not isinstance(data, dict):
        # Callers may hand over already-parsed JSON; a top-level list is as wrong as in the text form.
        raise LLMBadResponseError("extraction JSON is not an object")
    items = data.get("memories")
    if not isinstance(items, list):
        raise LLMBadResponseError("extraction JSON has no 'memories' list")
    drafts = [d for d in (validate_item(item, segment, today) for item in items[:MAX_ITEMS]) if d]
    return dedupe_drafts(drafts)


def _load_object(raw: str) -> dict[str, object]:
    text = raw.strip()
    if not text:
        raise LLMBadResponseError("blank JSON answer")
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LLMBadResponseError(f"invalid JSON: {exc.msg} at {exc.pos}") from None
    except RecursionError:  # nesting deeper than the parser's stack: still just a bad answer
        raise LLMBadResponseError("JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise LLMBadResponseError("JSON answer is not an object")
    return data


def validate_item(item: object, segment: Segmenter, today: str) -> MemoryDraft | None:
    """One memory, repaired where it safely can be: importance clamped, keywords filled, date added."""
    if not isinstance(item, dict):
        return None
    mtype = _enum(MemoryType, item.get("type"), MemoryType.EVENT if "type" not in item else None)
    if mtype is None:
        return None
    told = _told(today)
    # A preference or an instruction holds every day ("每周一不要打扰我"): only what happens has a date.
    timely = dates.has_days(mtype)
    event, happens = _clean_event(item.get("event"), told if timely else None, mtype is MemoryType.EVENT)
    if event is None:
        return None
    if told is not None and timely:
        happens = dates.model_when(item, told) or happens
    importance = _number(item.get("importance"))
    validity = _VALIDITY_ALIASES.get(str(item.get("validity", "30d")).strip().lower(), Validity.DAYS_30)
    keywords = clean_keywords(item.get("keywords"))
    if not keywords:
        keywords = clean_keywords(segment(_DATE_PREFIX.sub("", event)))
    if not keywords:
        return None
    return MemoryDraft(
        event=event, keywords=keywords, importance=rules.clamp_importance(importance),
        validity=validity, type=mtype, origin=Origin.EXTRACTED, supersedes=_handle(item.get("replaces")),
        happens=happens,
    )


def _told(today: str) -> date | None:
    try:
        return date.fromisoformat(today)
    except ValueError:
        return None


def _handle(value: object) -> int | None:
    """A memory number the model says this item replaces; anything else is no replacement. Whether the
    number is one the model was shown (and so the caller's own) is checked by the engine."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        value = int(value.strip().lstrip("#"))
    return value if isinstance(value, int) and value > 0 else None


def _clean_event(value: object, told: date | None, prefixed: bool = True) -> tuple[str | None, When | None]:
    """The memory's words and the day they name. A leading "YYYY-MM-DD" (the form older prompts asked for)
    becomes an event's date (``prefixed``; before a fact it was only the day of telling); relative date words
    left in the words ("下周三") are resolved against the day it was told and replaced by the date, which
    would otherwise be another day a week later."""
    if not isinstance(value, str):
        return None, None
    text = normalize_text(value)
    prefix = _DATE_PREFIX.match(text)
    bare = _DATE_PREFIX.sub("", text)
    if not _NOT_WORD.sub("", bare):
        return None, None
    happens = None
    if prefix is not None and told is not None and prefixed:
        day = dates.model_date(prefix.group(0).strip(), told)
        happens = When(on=day) if day is not None else None
    if told is not None:
        found = dates.resolve(bare, told)
        bare = found.text
        happens = found.when or happens  # "下个月离职" says more than the day it was told
    return bare[:MAX_EVENT_CHARS], happens


def _number(value: object) -> float:
    """The importance the model gave; a missing or unreadable one gets the middle of the scale rather
    than 0, which would make the memory unrecallable and delete it at the next cleanup."""
    if isinstance(value, bool) or value is None:
        return DEFAULT_IMPORTANCE
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return DEFAULT_IMPORTANCE
    return DEFAULT_IMPORTANCE


def _enum(kind: type[E], value: object, default: E | None) -> E | None:
    if value is None:
        return default
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        return None


def clean_keywords(value: object) -> list[str]:
    if isinstance(value, str):
        value = re.split(r"[,，、;；\s]+", value)
    if not isinstance(value, list):
        return []
    words = (normalize_keyword(str(v)) for v in value if isinstance(v, str | int | float) and not isinstance(v, bool))
    return list(dict.fromkeys(w for w in words if len(w) >= 2 or (w and not w.isascii())))[:MAX_KEYWORDS]


@lru_cache(maxsize=16_384)
def event_key(event: str) -> str:
    """The same event told twice: compare without the date prefix, punctuation, spaces or case."""
    return _NOT_WORD.sub("", _DATE_PREFIX.sub("", normalize_text(event)).lower())


def fingerprint(event: str) -> str:
    """A one-way hash of an event's normal form: lets a tombstone recognise the same event told again
    without keeping its words."""
    return hashlib.sha256(event_key(event).encode("utf-8")).hexdigest()[:32]


def keyword_overlap(a: Sequence[str], b: Sequence[str]) -> float:
    set_a, set_b = set(a), set(b)
    if not set_a or not set_b:
        return 0.0
    return len(set_a & set_b) / len(set_a | set_b)


def told_alike(a_event: str, a_keywords: Sequence[str], b_event: str, b_keywords: Sequence[str]) -> bool:
    """Two tellings that look alike: the same text, or most keywords shared. Alone this merges facts that
    differ in one word ("周二"/"周四" share every other keyword); ``same_event`` adds what tells them apart."""
    if event_key(a_event) == event_key(b_event):
        return True
    shared = set(a_keywords) & set(b_keywords)
    return len(shared) >= 2 and keyword_overlap(a_keywords, b_keywords) >= DUPLICATE_KEYWORD_OVERLAP


def extends(a_keywords: Sequence[str], b_keywords: Sequence[str]) -> bool:
    """One telling's keywords (two or more) all in the other's: the same thing with details added."""
    set_a, set_b = set(a_keywords), set(b_keywords)
    return min(len(set_a), len(set_b)) >= 2 and (set_a <= set_b or set_b <= set_a)


def same_event(a_event: str, a_keywords: Sequence[str], b_event: str, b_keywords: Sequence[str]) -> bool:
    """The same fact retold: told alike (or retold with details added), and no day, number, name, negation
    or swapped word tells them apart (``sameness.difference``)."""
    if event_key(a_event) == event_key(b_event):
        return True
    alike = told_alike(a_event, a_keywords, b_event, b_keywords) or extends(a_keywords, b_keywords)
    return alike and difference(a_event, b_event) is None


def dedupe_drafts(drafts: Sequence[MemoryDraft]) -> list[MemoryDraft]:
    """Merge drafts of the same event, each into the first kept one it matches (``same_event``). Only
    drafts that could match are compared (same text, or a shared keyword): a bulk load of thousands of
    drafts must not compare every pair."""
    kept: list[MemoryDraft] = []
    by_key: dict[str, list[int]] = {}
    by_word: dict[str, list[int]] = {}
    for draft in drafts:
        # ``same_event`` needs the same text or two shared keywords: a draft sharing one word is no candidate.
        shared = Counter(i for w in set(draft.keywords) for i in by_word.get(w, ()))
        near = {*by_key.get(event_key(draft.event), ()), *(i for i, n in shared.items() if n >= 2)}
        twin = next((i for i in sorted(near)
                     if same_event(kept[i].event, kept[i].keywords, draft.event, draft.keywords)), None)
        if twin is None:
            twin = len(kept)
            kept.append(draft)
        else:
            kept[twin] = _merge_drafts(kept[twin], draft)
        # Stale entries of a merged draft only add candidates; ``same_event`` decides.
        by_key.setdefault(event_key(kept[twin].event), []).append(twin)
        for word in set(kept[twin].keywords):
            by_word.setdefault(word, []).append(twin)
    return kept


def _merge_drafts(old: MemoryDraft, new: MemoryDraft) -> MemoryDraft:
    return replace(
        new,
        keywords=list(dict.fromkeys([*new.keywords, *old.keywords]))[:MAX_KEYWORDS],
        importance=max(old.importance, new.importance),
        validity=longer_validity(old.validity, new.validity),
        happens=new.happens or old.happens,
    )


def longer_validity(a: Validity, b: Validity) -> Validity:
    order = [Validity.DAYS_7, Validity.DAYS_30, Validity.PERMANENT]
    return max(a, b, key=order.index)


class MergeCandidates:
    """For each draft, the stored memories that could be the same event (same text, or at least two shared
    keywords: what ``same_event`` needs), without building a recall index."""

    def __init__(self, memories: Iterable[Memory]) -> None:
        self._by_id: dict[int, Memory] = {}
        self._by_key: dict[str, list[int]] = {}
        self._by_word: dict[str, list[int]] = {}
        for memory in memories:
            self._by_id[memory.id] = memory
            self._by_key.setdefault(event_key(memory.event), []).append(memory.id)
            for word in set(memory.keywords):
                self._by_word.setdefault(word, []).append(memory.id)

    def __len__(self) -> int:
        return len(self._by_id)

    def near(self, draft: MemoryDraft) -> list[Memory]:
        ids = set(self._by_key.get(event_key(draft.event), ()))
        shared = Counter(mid for word in set(draft.keywords) for mid in self._by_word.get(word, ()))
        ids.update(mid for mid, count in shared.items() if count >= 2)
        return [self._by_id[mid] for mid in sorted(ids)]


@dataclass(slots=True)
class MergePlan:
    inserts: list[MemoryDraft] = field(default_factory=list)
    updates: list[Memory] = field(default_factory=list)
    # Each updated row as it was stored before the merge, by handle: what a receipt's undo puts back.
    before: dict[int, Memory] = field(default_factory=dict)
    # Drafts left out before planning (a forgotten event told again, a memory changed meanwhile retold).
    dropped: int = 0

    def reworded(self) -> list[tuple[Memory, Memory]]:
        """(stored, merged) for each row a retelling gave other words: the user is told, and may undo."""
        return [(self.before[m.id], m) for m in self.updates
                if m.id in self.before and event_key(self.before[m.id].event) != event_key(m.event)]


def plan_merge(
    existing: Sequence[Memory], drafts: Sequence[MemoryDraft], now: datetime,
    near: Callable[[MemoryDraft], Iterable[Memory]] | None = None,
) -> MergePlan:
    """Dedup against stored memories: a retold event updates its row (newest wording, highest importance,
    fresh expiry) instead of adding a second one. ``near`` (instead of ``existing``) gives each draft only
    the memories that could be the same event, so a big batch is not compared with every stored row."""
    plan = MergePlan()
    touched: dict[int, Memory] = {}
    for draft in dedupe_drafts(drafts):
        pool = existing if near is None else near(draft)
        match = next(
            (m for m in chain(touched.values(), pool) if same_event(m.event, m.keywords, draft.event, draft.keywords)),
            None,
        )
        if match is None:
            plan.inserts.append(draft)
            continue
        plan.before.setdefault(match.id, match)
        touched[match.id] = merge_into(touched.get(match.id, match), draft, now)
    plan.updates = list(touched.values())
    return plan


def merge_into(memory: Memory, draft: MemoryDraft, now: datetime) -> Memory:
    """A retelling: the new words, the keywords of both, the higher importance, the longer validity; the day
    the new telling names, else the one already known (retold without its date, it is still that trip)."""
    happens = draft.happens or memory.happens
    validity = longer_validity(memory.validity, draft.validity)
    validity, expires, anchor = rules.dated_lifetime(validity, happens, now, now)
    return replace(
        memory,
        event=draft.event,
        terms=draft.terms,
        keywords=list(dict.fromkeys([*draft.keywords, *memory.keywords]))[:MAX_KEYWORDS],
        importance=max(memory.importance, rules.clamp_importance(draft.importance)),
        validity=validity,
        type=draft.type,
        updated_at=now,
        expires_at=expires,
        happens=happens,
        last_decay_at=memory.last_decay_at if happens is None else max(memory.last_decay_at, anchor),
    )


def tells(text: str, memory: Memory) -> bool:
    """Whether a message says what a memory holds: its event text, or most of its keywords. Used to take
    a forgotten memory out of the turns still queued or in context."""
    said = event_key(text)
    key = event_key(memory.event)
    if key and key in said:
        return True
    words = [k for k in memory.keywords if k]
    hits = sum(1 for k in words if k in said)
    return bool(words) and hits >= max(1, (len(words) + 1) // 2)


MAX_TODAY_EVENTS = 10
MAX_TODAY_CHARS = 40


def parse_today(raw: dict[str, object]) -> list[str]:
    """Small things the user reported doing today ("吃了火锅", "吃了感冒药"), from an extraction answer's
    optional ``today`` list; anything malformed is left out."""
    items = raw.get("today")
    if not isinstance(items, list):
        return []
    out = [normalize_text(i)[:MAX_TODAY_CHARS] for i in items[:MAX_TODAY_EVENTS] if isinstance(i, str)]
    return [i for i in dict.fromkeys(out) if i]
