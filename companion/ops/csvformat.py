"""The CSV form of memories, shared by backups, restore and exports: one column list, both directions.

UTF-8 with BOM so Excel shows Chinese. The seed's seven columns come first, then the rest; a new memory
column that belongs in backups is one line in ``COLUMNS``. Times are local wall-clock times
(``2025-12-23 16:05:00``, which a spreadsheet recognises and sorts) with the zone in the last column, so
restore gets the exact instant back. Codes carry their Chinese name (``30d（30天）``); importance has two
decimals. Cells a spreadsheet would run as a formula get a leading apostrophe that restore removes.

Rows are formatted by SQL expressions over the memory table (``select_expressions``), so writing a million
rows costs little more than the csv module alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from companion.core.models import Memory, MemoryType, Origin, Status, Tier, Validity
from companion.core.rules import MAX_IMPORTANCE, MIN_IMPORTANCE, tier_for
from companion.core.timeutil import from_db

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "'")
SHOWN_TIME = "%Y-%m-%d %H:%M:%S"
ZONE_HEADER = "时区"

LABELS: Mapping[type[StrEnum], Mapping[str, str]] = {
    Validity: {"permanent": "永久", "30d": "30天", "7d": "7天"},
    MemoryType: {"preference": "偏好", "fact": "事实", "instruction": "指令", "event": "事件"},
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


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    field: str  # the Memory attribute and table column
    kind: Kind
    enum: type[StrEnum] | None = None
    required: bool = False  # must be present in any backup, old or new


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
    Column("来源聊天", "source_chat_id", Kind.INT),
    Column("来源消息", "source_message_id", Kind.INT),
    Column("来源时间", "source_at", Kind.TIME),
    Column("取代者", "superseded_by", Kind.INT),
    Column("状态原因", "status_reason", Kind.TEXT),
    Column("指纹", "fingerprint", Kind.TEXT),
)
HEADERS: tuple[str, ...] = (*(c.header for c in COLUMNS), ZONE_HEADER)
BY_HEADER = {c.header: c for c in COLUMNS}
# The first backup format: ids were per user, times carried their offset, codes were bare.
LEGACY_HEADERS: tuple[str, ...] = tuple(c.header for c in COLUMNS if c.required)


def neutralise(cell: str) -> str:
    """A leading apostrophe makes Excel show ``=1+1`` as text; restore strips exactly one."""
    return f"'{cell}" if cell.startswith(FORMULA_PREFIXES) else cell


def unneutralise(cell: str) -> str:
    return cell[1:] if cell.startswith("'") else cell


def show_code(enum: type[StrEnum], value: str) -> str:
    return f"{value}（{LABELS[enum][value]}）"


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


# ---- writing: SQL expressions over the memory table ------------------------------------------------

def _sql_neutralised(column: str) -> str:
    return (f"CASE WHEN substr({column}, 1, 1) IN ('=', '+', '-', '@', char(9), char(13), '''') "
            f"THEN '''' || {column} ELSE {column} END")


def _sql_code(column: str, enum: type[StrEnum]) -> str:
    cases = " ".join(f"WHEN '{code}' THEN '{code}（{label}）'" for code, label in LABELS[enum].items())
    return f"CASE {column} {cases} ELSE {column} END"


def select_expressions(offset: timedelta | None) -> list[str]:
    """One SQL expression per CSV column. With a fixed offset, times are shifted in SQL; without one
    they come raw and ``finish_row`` converts them."""
    out: list[str] = []
    for c in COLUMNS:
        if c.kind is Kind.TIME:
            seconds = None if offset is None else int(offset.total_seconds())
            out.append(c.field if seconds is None else f"datetime({c.field}, '{seconds:+d} seconds')")
        elif c.kind is Kind.IMPORTANCE:
            out.append(f"printf('%.2f', {c.field})")
        elif c.kind in (Kind.TEXT, Kind.WORDS):
            out.append(_sql_neutralised(c.field))
        elif c.kind is Kind.CODE:
            assert c.enum is not None
            out.append(_sql_code(c.field, c.enum))
        else:
            out.append(c.field)
    return out


TIME_INDEXES = tuple(i for i, c in enumerate(COLUMNS) if c.kind is Kind.TIME)


def row_finisher(tz: tzinfo, offset: timedelta | None) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """Appends the zone; converts stored UTC times to local ones when SQL could not (no fixed offset)."""
    zone = zone_name(tz)
    if offset is not None:
        return lambda row: (*row, zone)

    def finish(row: tuple[Any, ...]) -> tuple[Any, ...]:
        cells = list(row)
        for i in TIME_INDEXES:
            if cells[i] is not None:
                cells[i] = from_db(str(cells[i])).astimezone(tz).strftime(SHOWN_TIME)
        cells.append(zone)
        return tuple(cells)

    return finish


# ---- reading ----------------------------------------------------------------------------------------

def parse_time(text: str, zone: tzinfo | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        if zone is None:
            raise ValueError(f"time {text!r} has no UTC offset and the row names no {ZONE_HEADER}")
        moment = moment.replace(tzinfo=zone)
    return moment.astimezone(UTC)


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


def _int(text: str, what: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{what} {value} is negative")
    return value


def parse_row(row: Mapping[str, str]) -> Memory:
    """One CSV row (header -> cell) as a memory; raises ValueError naming what is wrong. Columns a
    backup does not have take the defaults of their time (old backups have no life-cycle columns)."""
    zone = parse_zone(row.get(ZONE_HEADER, ""))
    values: dict[str, Any] = {}
    for header, column in BY_HEADER.items():
        if header not in row:
            continue
        cell = row[header]
        if column.kind is Kind.TIME:
            values[column.field] = parse_time(cell, zone)
        elif column.kind is Kind.INT:
            values[column.field] = _int(cell, header) if cell else None
        elif column.kind is Kind.IMPORTANCE:
            importance = float(cell)
            if not MIN_IMPORTANCE <= importance <= MAX_IMPORTANCE:
                raise ValueError(f"importance {importance} outside 0-100")
            values[column.field] = importance
        elif column.kind is Kind.CODE:
            assert column.enum is not None
            values[column.field] = column.enum(_code(column.enum, cell))
        elif column.kind is Kind.BOOL:
            values[column.field] = cell.strip() in {"1", "true", "True"}
        elif column.kind is Kind.WORDS:
            values[column.field] = [k for k in unneutralise(cell).split(",") if k]
        else:
            values[column.field] = unneutralise(cell)
    for field in ("id", "created_at", "updated_at", "last_decay_at", "mention_count"):
        if values.get(field) is None:
            raise ValueError(f"{field} is required")
    if values["id"] == 0:
        raise ValueError("id 0 is not a memory handle")
    values.setdefault("tier", tier_for(values["validity"]))
    for field in ("access_count",):
        if values.get(field) is None:
            values[field] = 0
    # No check on the event text: whatever the database held (even blank) must restore, or a backup
    # with one odd row could never be restored at all.
    return Memory(**values)
