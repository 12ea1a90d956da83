"""The benchmark dataset: JSON lines of memories and queries, processed in file order.

A query may only name as relevant memories of its own user that appear earlier in the file, so a
reader can replay the file once and every system sees exactly what existed at question time.

Optional query fields (older files without them read as before): ``context``, the user's previous
turns, oldest first, and ``reply``, the companion's last reply, which the engine reads as recent
context; ``"relevant": []`` marks a turn no stored memory is relevant to (counted for the
false-injection rate, never for hit@k). Two more, for telling real negatives from turns that only look like
ones (``bench.recall``): ``about``, on a negative turn, the user's own memory ids the dataset annotates the
turn as being about (DuLeMon tags the user utterances that state a persona fact); ``subjects``, on a memory or
a query, what the dataset's own schema says it is about (MemDaily: the relation, place or item kind, event
name), so that a question asked of another user whose memories share a subject is not counted as a clean
negative.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias, cast, get_args
from zoneinfo import ZoneInfo

Validity: TypeAlias = Literal["permanent", "30d", "7d"]
VALIDITIES: frozenset[str] = frozenset(get_args(Validity))
# Sources without a timezone are Chinese chat logs, so their wall clock is Beijing time.
DEFAULT_TZ = ZoneInfo("Asia/Shanghai")


class DatasetError(ValueError):
    """A line of a dataset file is not valid JSON or does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class MemoryLine:
    user: str
    id: str
    time: datetime
    text: str
    keywords: tuple[str, ...] | None = None
    importance: int | None = None
    validity: Validity | None = None
    subjects: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueryLine:
    user: str
    id: str
    time: datetime
    text: str
    relevant: tuple[str, ...]
    context: tuple[str, ...] = ()
    reply: str | None = None
    about: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()

    @property
    def negative(self) -> bool:
        """A turn no stored memory is relevant to."""
        return not self.relevant


DatasetLine: TypeAlias = MemoryLine | QueryLine


def parse_time(value: str) -> datetime:
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=DEFAULT_TZ)


def to_json(line: DatasetLine) -> dict[str, Any]:
    common = {"user": line.user, "id": line.id, "time": line.time.isoformat(timespec="seconds"),
              "text": line.text}
    if isinstance(line, QueryLine):
        query: dict[str, Any] = {"kind": "query", **common, "relevant": list(line.relevant)}
        if line.context:
            query["context"] = list(line.context)
        if line.reply is not None:
            query["reply"] = line.reply
        if line.about:
            query["about"] = list(line.about)
        if line.subjects:
            query["subjects"] = list(line.subjects)
        return query
    out: dict[str, Any] = {"kind": "memory", **common}
    if line.keywords is not None:
        out["keywords"] = list(line.keywords)
    if line.importance is not None:
        out["importance"] = line.importance
    if line.validity is not None:
        out["validity"] = line.validity
    if line.subjects:
        out["subjects"] = list(line.subjects)
    return out


def from_json(obj: object) -> DatasetLine:
    """One decoded line; raises ValueError naming the offending field."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    if kind not in ("memory", "query"):
        raise ValueError(f"field 'kind' must be 'memory' or 'query', got {kind!r}")
    user, ident, text = (_text(obj, name) for name in ("user", "id", "text"))
    try:
        time = parse_time(_text(obj, "time"))
    except ValueError as exc:
        raise ValueError(f"field 'time': {exc}") from exc
    if kind == "query":
        return QueryLine(user, ident, time, text, _relevant(obj), _context(obj), _reply(obj),
                         _strings(obj, "about"), _strings(obj, "subjects"))
    return MemoryLine(user, ident, time, text, _keywords(obj), _importance(obj), _validity(obj),
                      _strings(obj, "subjects"))


def _text(obj: dict[str, Any], name: str) -> str:
    if name not in obj:
        raise ValueError(f"missing field {name!r}")
    value = obj[name]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {name!r} must be a non-empty string")
    return value


def _relevant(obj: dict[str, Any]) -> tuple[str, ...]:
    if "relevant" not in obj:
        raise ValueError("missing field 'relevant'")
    value = obj["relevant"]
    # An empty list is a deliberate negative turn; a missing or malformed one is a conversion bug.
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError("field 'relevant' must be a list of memory ids")
    return tuple(value)


def _context(obj: dict[str, Any]) -> tuple[str, ...]:
    value = obj.get("context")
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("field 'context' must be a list of strings")
    return tuple(value)


def _strings(obj: dict[str, Any], name: str) -> tuple[str, ...]:
    """An optional list of non-empty strings (absent: empty)."""
    value = obj.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"field {name!r} must be a list of non-empty strings")
    return tuple(value)


def _reply(obj: dict[str, Any]) -> str | None:
    value = obj.get("reply")
    if value is not None and not isinstance(value, str):
        raise ValueError("field 'reply' must be a string")
    return value


def _keywords(obj: dict[str, Any]) -> tuple[str, ...] | None:
    value = obj.get("keywords")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("field 'keywords' must be a list of strings")
    return tuple(value)


def _importance(obj: dict[str, Any]) -> int | None:
    value = obj.get("importance")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ValueError("field 'importance' must be an integer from 0 to 100")
    return value


def _validity(obj: dict[str, Any]) -> Validity | None:
    value = obj.get("validity")
    if value is None:
        return None
    for allowed in get_args(Validity):
        if value == allowed:
            return cast(Validity, allowed)
    raise ValueError(f"field 'validity' must be one of {sorted(VALIDITIES)}, got {value!r}")


class _OrderCheck:
    """Rejects duplicate memory ids and queries whose gold memory has not been written yet."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}

    def check(self, line: DatasetLine) -> None:
        ids = self._seen.setdefault(line.user, set())
        if isinstance(line, MemoryLine):
            if line.id in ids:
                raise ValueError(f"duplicate memory id {line.id!r} for user {line.user!r}")
            ids.add(line.id)
            return
        missing = [rid for rid in line.relevant if rid not in ids]
        if missing:
            raise ValueError(f"query {line.id!r}: relevant ids {missing} are not earlier memories "
                             f"of user {line.user!r}")


def read_dataset(path: str | os.PathLike[str]) -> Iterator[DatasetLine]:
    """Lines in file order; blank lines are skipped, unknown fields ignored."""
    check = _OrderCheck()
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                line = from_json(json.loads(raw))
                check.check(line)
            except ValueError as exc:  # json.JSONDecodeError is a ValueError too
                raise DatasetError(f"{path}:{number}: {exc}") from exc
            yield line


def write_dataset(path: str | os.PathLike[str], lines: Iterable[DatasetLine]) -> int:
    """Writes atomically (a failed conversion leaves no half file behind); returns the line count."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    count = 0
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(to_json(line), ensure_ascii=False) + "\n")
                count += 1
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return count
