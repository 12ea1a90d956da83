"""The CSV form of memories, shared by backups, restore and exports: one column list, both directions.

UTF-8 with BOM so Excel shows Chinese. The seed's seven columns come first, then the rest; a new memory
column that belongs in backups is one line in ``COLUMNS``. Times are local wall-clock times with their UTC
offset (``2025-12-23 16:05:00+08:00``), the zone's name in the last column; a time without an offset (older
files) is read in that zone, or in the configured one. Codes carry their Chinese name (``30d（30天）``);
importance is written in full (the shortest form that reads back as the same number: a restore of the CSV
files and of the snapshot give the same memories). Cells a spreadsheet would run as a formula get a
leading apostrophe that restore removes. A forgotten memory is a tombstone row: status
``forgotten（已遗忘）``, no text, no keywords, no importance, whatever a hand-edited file says.

Reading is tolerant of columns it does not know (a newer backup) and of optional ones it lacks (an older
one); every cell is checked and capped as any input is.

The cells follow ``core.cells`` (``CELLS``): a store that formats rows itself (SQLite's snapshot reader,
in SQL, so writing a million rows costs little more than the csv module alone) gives exactly what
``backup_row`` gives for a ``Memory`` streamed from any other store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from companion.core import cells, dates
from companion.core.cells import CellColumn, CellKind
from companion.core.cells import neutralise as neutralise
from companion.core.cells import show_time as show_time
from companion.core.extraction import MAX_KEYWORDS, fingerprint
from companion.core.models import Memory, MemoryType, Origin, Status, Tier, Validity
from companion.core.rules import MAX_IMPORTANCE, MIN_IMPORTANCE, tier_for
from companion.core.text import MAX_KEYWORD_CHARS

ZONE_HEADER = "时区"
# SQLite integers are signed 64-bit: a larger id could not be stored (Python raises OverflowError).
MAX_INT = 2**63 - 1
# Caps on cells, as on any input: the longest text any path can store (one Telegram message, 4,096
# characters: an admin's /mem_add; tests/test_backup_scopes.py holds it to chat.texts.TELEGRAM_LIMIT), the
# keyword limits every writer applies, and short bookkeeping codes. Longer cells are cut and counted.
MAX_EVENT_CHARS = 4096
MAX_CELL_CHARS: Mapping[str, int] = {"event": MAX_EVENT_CHARS, "status_reason": 64, "fingerprint": 64}

LABELS: Mapping[type[StrEnum], Mapping[str, str]] = {
    Validity: {"permanent": "永久", "30d": "30天", "7d": "7天"},
    MemoryType: {"preference": "偏好", "fact": "事实", "instruction": "要求", "event": "事件"},
    Origin: {"extracted": "对话提取", "explicit": "用户要求", "tool": "模型工具", "admin": "管理员",
             "restore": "备份恢复"},
    Status: {"active": "有效", "archived": "已归档", "superseded": "已取代", "forgotten": "已遗忘"},
    Tier: {"short": "短期", "medium": "中期", "long": "长期"},
}


class Kind(StrEnum):
    INT = "int"
    TEXT = "text"
    WORDS = "words"
    IMPORTANCE = "importance"
    TIME = "time"
    CODE = "code"
    BOOL = "bool"
    DATE = "date"


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    field: str  # the Memory attribute and table column
    kind: Kind
    enum: type[StrEnum] | None = None
    required: bool = False  # must be present in any backup, old or new
    signed: bool = False  # chat ids of groups are negative


COLUMNS: tuple[Column, ...] = (
    # The seed's seven, in its order.
    Column("id", "id", Kind.INT, required=True),
    Column("事件", "event", Kind.TEXT, required=True),
    Column("关键词", "keywords", Kind.WORDS, required=True),
    Column("重要程度", "importance", Kind.IMPORTANCE, required=True),
    Column("创建时间", "created_at", Kind.TIME, required=True),
    Column("有效期", "validity", Kind.CODE, Validity, required=True),
    Column("最后提及时间", "last_mentioned_at", Kind.TIME, required=True),
    # Since the first release.
    Column("类型", "type", Kind.CODE, MemoryType, required=True),
    Column("来源", "origin", Kind.CODE, Origin, required=True),
    Column("提及次数", "mention_count", Kind.INT, required=True),
    Column("更新时间", "updated_at", Kind.TIME, required=True),
    Column("过期时间", "expires_at", Kind.TIME, required=True),
    Column("衰减时间", "last_decay_at", Kind.TIME, required=True),
    # The life cycle (handles, tiers, reviews, tombstones).
    Column("状态", "status", Kind.CODE, Status),
    Column("层级", "tier", Kind.CODE, Tier),
    Column("复习时间", "review_at", Kind.TIME),
    Column("最后访问时间", "last_accessed_at", Kind.TIME),
    Column("访问次数", "access_count", Kind.INT),
    Column("置顶", "pinned", Kind.BOOL),
    Column("来源聊天", "source_chat_id", Kind.INT, signed=True),
    Column("来源消息", "source_message_id", Kind.INT),
    Column("来源时间", "source_at", Kind.TIME),
    Column("取代者", "superseded_by", Kind.INT),
    Column("状态原因", "status_reason", Kind.TEXT),
    Column("指纹", "fingerprint", Kind.TEXT),
    # When it happens (ISO 8601: 2026-12-09, 2026-12-09/2026-12-11, R/2026-05-20 for a yearly date).
    Column("日期", "happens", Kind.DATE),
)
HEADERS: tuple[str, ...] = (*(c.header for c in COLUMNS), ZONE_HEADER)
BY_HEADER = {c.header: c for c in COLUMNS}
# The first backup format: ids were per user, times carried their offset, codes were bare.
LEGACY_HEADERS: tuple[str, ...] = tuple(c.header for c in COLUMNS if c.required)


def unneutralise(cell: str) -> str:
    return cell.removeprefix(cells.NEUTRALISER)


def show_code(enum: type[StrEnum], value: str) -> str:
    return cells.show_code(LABELS[enum], value)


def zone_name(tz: tzinfo) -> str:
    return str(getattr(tz, "key", None) or tz.tzname(datetime.now(UTC)) or "UTC")


def fixed_offset(tz: tzinfo, now: datetime, years: int = 30) -> timedelta | None:
    """The zone's UTC offset if it is the same for every week from 2000 to ``years`` after ``now``
    (Asia/Shanghai: +8 since 1991), else None (zones with daylight saving time)."""
    moment = datetime(2000, 1, 1, tzinfo=UTC)
    end = now + timedelta(days=365 * years)
    first = moment.astimezone(tz).utcoffset()
    while moment < end:
        if moment.astimezone(tz).utcoffset() != first:
            return None
        moment += timedelta(days=7)
    return first


# ---- writing: the cells of ``core.cells``, formatted by the store when it can (SQLite in SQL) ---------

CONTENT_FIELDS = frozenset({"event", "keywords", "importance", "happens"})  # blank in a tombstone's row
_CELL_KINDS = {Kind.INT: CellKind.PLAIN, Kind.BOOL: CellKind.PLAIN, Kind.TEXT: CellKind.TEXT,
               Kind.WORDS: CellKind.WORDS, Kind.IMPORTANCE: CellKind.IMPORTANCE, Kind.TIME: CellKind.TIME,
               Kind.CODE: CellKind.CODE, Kind.DATE: CellKind.DATE}
CELLS: tuple[CellColumn, ...] = tuple(
    CellColumn(c.field, _CELL_KINDS[c.kind], LABELS[c.enum] if c.enum is not None else None, c.field in CONTENT_FIELDS)
    for c in COLUMNS
)


def backup_row(memory: Memory, tz: tzinfo, *, rounded: bool = False) -> list[object]:
    """One memory's row of a backup file, zone last: what ``SnapshotReader.cell_rows`` gives in SQL.
    ``rounded``: importance with two decimals, for a file people read (an export), not one to restore."""
    return [*cells.memory_cells(memory, CELLS, tz, rounded=rounded), zone_name(tz)]


# ---- reading ----------------------------------------------------------------------------------------

def parse_time(text: str, zone: tzinfo | None) -> datetime | None:
    """A cell with its offset is exact; one without (older files) is local time in ``zone``."""
    if not text:
        return None
    moment = datetime.fromisoformat(text.strip())
    if moment.tzinfo is None:
        if zone is None:
            raise ValueError(f"time {text!r} has no UTC offset and the row names no {ZONE_HEADER}")
        moment = moment.replace(tzinfo=zone)
    return moment.astimezone(UTC).replace(microsecond=0)


def parse_zone(text: str) -> tzinfo | None:
    if not text:
        return None
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown {ZONE_HEADER} {text!r}") from None


def _code(enum: type[StrEnum], text: str) -> str:
    code = text.split("（", 1)[0].strip()
    if enum is Origin:
        return Origin.parse(code).value
    return enum(code).value


def _int(text: str, column: Column) -> int:
    value = int(text)
    if value < 0 and not column.signed:
        raise ValueError(f"{column.header} {value} is negative")
    if not -MAX_INT <= value <= MAX_INT:
        raise ValueError(f"{column.header} {text.strip()} is too large")
    return value


@dataclass(slots=True)
class ParsedRow:
    memory: Memory
    cut: int  # cells cut to their cap


def _capped(field: str, text: str) -> tuple[str, bool]:
    cap = MAX_CELL_CHARS.get(field)
    return (text[:cap], True) if cap is not None and len(text) > cap else (text, False)


def parse_row(row: Mapping[str, str], default_zone: tzinfo | None = None) -> ParsedRow:
    """One CSV row (header -> cell) as a memory; raises ValueError naming what is wrong. Columns a
    backup does not have take the defaults of their time (old backups have no life-cycle columns);
    columns this version does not know are ignored. A time without an offset is read in the row's
    时区, else in ``default_zone``."""
    zone = parse_zone(row.get(ZONE_HEADER, "")) or default_zone
    values: dict[str, Any] = {}
    cut = 0
    forgotten = _code(Status, row.get("状态", "")) == Status.FORGOTTEN.value if row.get("状态") else False
    for header, column in BY_HEADER.items():
        if header not in row:
            continue
        cell = row[header]
        if column.kind is Kind.TIME:
            values[column.field] = parse_time(cell, zone)
        elif column.kind is Kind.INT:
            values[column.field] = _int(cell, column) if cell.strip() else None
        elif column.kind is Kind.IMPORTANCE:
            if forgotten:
                values[column.field] = MIN_IMPORTANCE
                continue
            importance = float(cell)
            if not MIN_IMPORTANCE <= importance <= MAX_IMPORTANCE:
                raise ValueError(f"importance {importance} outside 0-100")
            values[column.field] = importance
        elif column.kind is Kind.CODE:
            assert column.enum is not None
            values[column.field] = column.enum(_code(column.enum, cell))
        elif column.kind is Kind.BOOL:
            values[column.field] = cell.strip() in {"1", "true", "True"}
        elif column.kind is Kind.DATE:
            values[column.field] = None if forgotten else dates.from_text(cell)  # unreadable: no date, kept
        elif column.kind is Kind.WORDS:
            words = [k for k in unneutralise(cell).split(",") if k]
            kept = [w[:MAX_KEYWORD_CHARS] for w in words[:MAX_KEYWORDS]]
            cut += kept != words
            values[column.field] = kept
        else:
            text, was_cut = _capped(column.field, unneutralise(cell))
            cut += was_cut
            values[column.field] = text
    for field in ("id", "created_at", "updated_at", "last_decay_at", "mention_count"):
        if values.get(field) is None:
            raise ValueError(f"{field} is required")
    if values["id"] <= 0:
        raise ValueError(f"id {values['id']} is not a memory handle")
    values.setdefault("tier", tier_for(values["validity"]))
    for field in ("access_count",):
        if values.get(field) is None:
            values[field] = 0
    if forgotten:
        # A tombstone is content-free whatever the file says; the words it had still mark the same
        # event told again (the fingerprint), never the text.
        if values.get("event") and not values.get("fingerprint"):
            values["fingerprint"] = fingerprint(values["event"])
        values.update(event="", keywords=[], importance=MIN_IMPORTANCE, superseded_by=None, happens=None)
    # No check on the event text: whatever the database held (even blank) must restore, or a backup
    # with one odd row could never be restored at all.
    return ParsedRow(Memory(**values), cut)
