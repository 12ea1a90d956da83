"""When things happen: Chinese date words read against the day they were said, the stored form of a
``When``, how it is shown, and how long a dated memory lives.

Pure functions: the day a message was said (``today``, a local date) is always an argument. A relative
word ("下周三") is resolved once, when it is told, because a week later it names another day; what is
stored is the date (``When``) and words that no longer say it.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta, tzinfo

from companion.core.models import WEEKDAYS, MemoryType, When

# An event stays this long after its last day: long enough to be asked how it went, then it goes.
AFTER_END = timedelta(days=7)
# A model's date further than this from the day it was told is a mistake, not a plan.
PLAUSIBLE = timedelta(days=3 * 366)
_NUMERALS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
             "八": 8, "九": 9, "十": 10}
_NUM = r"(?:\d{1,2}|[一二两三四五六七八九十]{1,3})"


def number(text: str) -> int | None:
    """A small number written in digits or Chinese numerals (1-39): 3, 十二, 二十一."""
    if text.isdigit():
        return int(text)
    if not text or any(ch not in _NUMERALS for ch in text):
        return None
    if "十" not in text:
        return _NUMERALS[text] if len(text) == 1 else None
    tens, _, ones = text.partition("十")
    if len(tens) > 1 or len(ones) > 1:
        return None
    return (_NUMERALS[tens] if tens else 1) * 10 + (_NUMERALS[ones] if ones else 0)


def has_days(kind: MemoryType) -> bool:
    """Whether memories of this type happen on days: an event or a fact does; a preference or an instruction
    holds every day ("喜欢周日去爬山", "每周一不要打扰我"), so its day words stay words."""
    return kind in (MemoryType.EVENT, MemoryType.FACT)


def resolve_for(kind: MemoryType, text: str, today: date) -> Dated:
    """``resolve`` for a memory of ``kind``: the words as they are for a type without days."""
    return resolve(text, today) if has_days(kind) else Dated(text, None)


# ---- the stored form ------------------------------------------------------------------------------------

def to_text(when: When | None) -> str | None:
    """ISO 8601: ``2026-12-09``, a span ``2026-12-09/2026-12-11``, a time ``2026-12-09T14:00``, a yearly date
    ``R/2026-05-20`` (a repeating interval). Text sorts by its first day, so a range is a string comparison."""
    if when is None:
        return None
    text = when.on.isoformat()
    if when.at is not None:
        text += f"T{when.at.strftime('%H:%M')}"
    if when.ends is not None and when.ends != when.on:
        text += f"/{when.ends.isoformat()}"
    return f"R/{text}" if when.yearly else text


def from_text(text: object) -> When | None:
    """The stored form back; anything else (blank, malformed) is no date, never an error: a date is an
    addition to a memory, and a memory must load without it."""
    if not isinstance(text, str) or not text.strip():
        return None
    body = text.strip()
    yearly = body.startswith("R/")
    body = body.removeprefix("R/")
    first, _, last = body.partition("/")
    day, _, clock = first.partition("T")
    try:
        on = date.fromisoformat(day)
        at = time.fromisoformat(clock) if clock else None
        ends = date.fromisoformat(last) if last else None
    except ValueError:
        return None
    if ends is not None and ends < on:
        ends = None
    return When(on=on, ends=ends, at=at, yearly=yearly)


# ---- lifetime -------------------------------------------------------------------------------------------

def last_day(when: When) -> date:
    return when.ends or when.on


def next_occurrence(when: When, today: date) -> date:
    """A yearly date's next day on or after ``today`` (29 February falls on the 28th in other years); a
    one-time date is its own day."""
    if not when.yearly:
        return when.on
    for year in (today.year, today.year + 1):
        day = min(when.on.day, calendar.monthrange(year, when.on.month)[1])
        candidate = date(year, when.on.month, day)
        if candidate >= today:
            return candidate
    raise AssertionError("unreachable: next year's date is always ahead")


def end_of_day(day: date, tz: tzinfo) -> datetime:
    """The first instant after ``day`` in ``tz``, as an aware datetime."""
    return datetime.combine(day + timedelta(days=1), time(), tzinfo=tz)


def expires_at(when: When, tz: tzinfo) -> datetime | None:
    """A dated memory expires ``AFTER_END`` after its last local day; a yearly one never."""
    if when.yearly:
        return None
    return end_of_day(last_day(when), tz) + AFTER_END


def is_ahead(when: When | None, today: date) -> bool:
    """Still to come (or going on): a yearly date always is."""
    return when is not None and (when.yearly or last_day(when) >= today)


def overlaps(when: When, start: date, end: date, today: date) -> bool:
    """Whether it happens on a day of ``start``..``end`` (inclusive); a yearly date on its day that year."""
    if when.yearly:
        day = next_occurrence(when, start)
        return day <= end
    return when.on <= end and last_day(when) >= start


# ---- shown to people ------------------------------------------------------------------------------------

def describe(when: When) -> str:
    return when.describe()


# ---- what a model said ----------------------------------------------------------------------------------

def model_date(value: object, told: date) -> date | None:
    """An ISO date from a model's JSON, kept only when it parses and lies within ``PLAUSIBLE`` of the day it
    was told: a wrong date is worse than none, so nothing is guessed."""
    if not isinstance(value, str):
        return None
    try:
        day = date.fromisoformat(value.strip()[:10])
    except ValueError:
        return None
    return day if abs(day - told) <= PLAUSIBLE else None


def model_when(item: dict[str, object], told: date) -> When | None:
    """``date``, ``end_date``, ``time`` and ``yearly`` of one extracted item, validated one by one."""
    on = model_date(item.get("date"), told)
    if on is None:
        return None
    ends = model_date(item.get("end_date"), told)
    if ends is not None and (ends < on or ends - on > timedelta(days=366)):
        ends = None
    at = None
    if isinstance(item.get("time"), str):
        try:
            at = time.fromisoformat(str(item["time"]).strip()[:5])
        except ValueError:
            at = None
    return When(on=on, ends=ends, at=at, yearly=item.get("yearly") is True)


# ---- Chinese date words ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Found:
    """A date expression found in a text: where it stands, the ``When`` it names (None: it names an
    impossible day such as 2月30号), and whether it is relative (goes stale, so the stored words say the date
    instead). ``said``: what the words themselves name when ``when`` goes further ("下周三" of "下周三去杭州出差
    三天" is one day of the three)."""

    start: int
    end: int
    when: When | None
    relative: bool
    said: When | None = None

    @property
    def absolute(self) -> str:
        """The words for the day itself, which never go stale: 12月9日（周三）, 12月7日-13日."""
        when = self.said or self.when
        return "" if when is None else when.describe()


_RELATIVE_DAYS = {"今天": 0, "今晚": 0, "今早": 0, "明天": 1, "明早": 1, "明晚": 1, "后天": 2, "大后天": 3,
                  "昨天": -1, "昨晚": -1, "前天": -2, "大前天": -3}
_DAY_WORD = "|".join(sorted(_RELATIVE_DAYS, key=len, reverse=True))
_WEEK_PREFIX = {"这": 0, "本": 0, "这个": 0, "下": 1, "下个": 1, "下下": 2, "下下个": 2, "上": -1, "上个": -1}
_WEEKDAY = r"(?:周|星期|礼拜)([一二三四五六日天1-7])"
# "每周一" and "每个周末" hold every week: no one day.
_NOT_EVERY = r"(?<!每)(?<!每个)(?<!隔)"
_CLOCK = (r"(?:(早上|上午|中午|下午|晚上|傍晚)?\s*(" + _NUM + r")(?:点|:|：)(半|\d{2}|" + _NUM + r"分?)?)")
_PATTERNS = [
    # 12月9号, 明年5月20日, 2026年12月9日
    ("month_day", re.compile(r"(?:(\d{4})年|(明年|今年|去年))?(" + _NUM + r")月(" + _NUM + r")[号日]?")),
    ("next_month_day", re.compile(r"(下个?月|这个?月|本月)(" + _NUM + r")[号日]")),
    ("week_day", re.compile(_NOT_EVERY + r"(下下个?|下个?|这个?|本|上个?)?" + _WEEKDAY)),
    ("weekend", re.compile(_NOT_EVERY + r"(下下个?|下个?|这个?|本|上个?)?周末")),
    ("week", re.compile(r"(下下个?周|下个?周|这个?周|本周|下个?星期|这个?星期)(?![一二三四五六日天1-7末])")),
    ("month_end", re.compile(r"(下个?月|这个?月|本月)?(月底|月初|月中)")),
    ("month", re.compile(r"(下个?月)(?![初底中\d一二三四五六七八九十])")),
    ("day_word", re.compile(r"(" + _DAY_WORD + r")")),
    ("in_days", re.compile(r"过(两|几|三)天")),
    ("day_only", re.compile(r"(?<![月\d每])(" + _NUM + r")[号](?!码|线|楼|车|房|店|门|口)")),
]
_RANGE_JOIN = re.compile(r"\s*(?:到|至|-|－|~|～|—)\s*")
# A duration later in the same clause: "下周三去杭州出差三天" is a three-day span from that Wednesday.
_DURATION = re.compile(r"[^，。,.!！?？；;\d]{0,12}?(" + _NUM + r")天(?!后|前|内|以内|之内)")
_YEARLY = re.compile(r"生日|纪念日|每年|周年")


def _week_start(day: date, weeks: int) -> date:
    return day - timedelta(days=day.weekday()) + timedelta(weeks=weeks)


def _weekday_index(char: str) -> int:
    return 6 if char in "日天7" else (int(char) - 1 if char.isdigit() else WEEKDAYS.index(char))


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _nearest_year(month: int, day: int, today: date) -> date | None:
    """A month and day without a year: the occurrence nearest to ``today`` (1月3号 said in December is
    next January; 11月20号 said in December is last month)."""
    options = [d for d in (_safe_date(y, month, day) for y in (today.year - 1, today.year, today.year + 1)) if d]
    if not options:
        return None
    return min(options, key=lambda d: (abs((d - today).days), d < today))


def _match(kind: str, m: re.Match[str], today: date) -> tuple[When | None, bool] | None:
    """The ``When`` one match names and whether it is relative; None when the words are no date at all."""
    if kind == "month_day":
        month, day = number(m.group(3)), number(m.group(4))
        if month is None or day is None:
            return None
        if not 1 <= month <= 12 or not 1 <= day <= 31:
            return None, False  # 13月1号: a day no calendar has
        if m.group(1):
            found = _safe_date(int(m.group(1)), month, day)
        elif m.group(2):
            found = _safe_date(today.year + {"明年": 1, "今年": 0, "去年": -1}[m.group(2)], month, day)
        else:
            found = _nearest_year(month, day, today)
            if found is None and _safe_date(2024, month, day) is None:
                return None, False  # 2月30号: a day no year has
        return (When(on=found) if found else None), bool(m.group(2))
    if kind == "next_month_day":
        day = number(m.group(2))
        if day is None or not 1 <= day <= 31:
            return None
        first = today.replace(day=1)
        if m.group(1).startswith("下"):
            first = (first + timedelta(days=32)).replace(day=1)
        found = _safe_date(first.year, first.month, day)
        return (When(on=found) if found else None), True
    if kind == "week_day":
        weeks = _WEEK_PREFIX.get(m.group(1) or "", 0)
        target = _weekday_index(m.group(2))
        if m.group(1):
            return When(on=_week_start(today, weeks) + timedelta(days=target)), True
        ahead = (target - today.weekday()) % 7  # a bare 周三 is the next Wednesday (today when it is one)
        return When(on=today + timedelta(days=ahead)), True
    if kind == "weekend":
        weeks = _WEEK_PREFIX.get(m.group(1) or "", 0)
        saturday = _week_start(today, weeks) + timedelta(days=5)
        return When(on=saturday, ends=saturday + timedelta(days=1)), True
    if kind == "week":
        prefix = m.group(1)
        weeks = 2 if prefix.startswith("下下") else 1 if prefix.startswith("下") else 0
        monday = _week_start(today, weeks)
        return When(on=monday, ends=monday + timedelta(days=6)), True
    if kind == "month_end":
        first = today.replace(day=1)
        if (m.group(1) or "").startswith("下"):
            first = (first + timedelta(days=32)).replace(day=1)
        last = calendar.monthrange(first.year, first.month)[1]
        part = m.group(2)
        if part == "月底":
            return When(on=first.replace(day=max(1, last - 2)), ends=first.replace(day=last)), True
        if part == "月初":
            if not m.group(1):  # a bare 月初 said after the 10th means next month's
                first = first if today.day <= 10 else (first + timedelta(days=32)).replace(day=1)
            return When(on=first, ends=first.replace(day=5)), True
        return When(on=first.replace(day=11), ends=first.replace(day=20)), True
    if kind == "month":
        first = (today.replace(day=1) + timedelta(days=32)).replace(day=1)
        return When(on=first, ends=first.replace(day=calendar.monthrange(first.year, first.month)[1])), True
    if kind == "day_word":
        return When(on=today + timedelta(days=_RELATIVE_DAYS[m.group(1)])), True
    if kind == "in_days":
        return When(on=today + timedelta(days={"两": 2, "三": 3, "几": 3}[m.group(1)])), True
    if kind == "day_only":
        day = number(m.group(1))
        if day is None or not 1 <= day <= 31:
            return None
        options = []
        for shift in (-1, 0, 1):
            first = (today.replace(day=15) + timedelta(days=31 * shift)).replace(day=1)
            found = _safe_date(first.year, first.month, day)
            if found:
                options.append(found)
        if not options:
            return None, True
        return When(on=min(options, key=lambda d: (abs((d - today).days), d < today))), True
    raise AssertionError(kind)


# Weekdays in a sentence about every week or a liking are habits: "每周一和周二", "喜欢周日去爬山".
_HABIT = re.compile(r"每个?(?:周|星期|礼拜)|每逢|喜欢|爱在|习惯|经常|总是|通常|一般都|平时")


def _scan(text: str, today: date) -> Iterator[Found]:
    taken: list[tuple[int, int]] = []
    found: list[Found] = []
    habit = _HABIT.search(text) is not None
    for kind, pattern in _PATTERNS:
        if habit and kind in ("week_day", "weekend"):
            continue
        for m in pattern.finditer(text):
            if any(m.start() < end and start < m.end() for start, end in taken):
                continue
            result = _match(kind, m, today)
            if result is None:
                continue
            taken.append((m.start(), m.end()))
            found.append(Found(m.start(), m.end(), result[0], result[1]))
    yield from sorted(found, key=lambda f: f.start)


def _clock(text: str, start: int) -> tuple[time, int] | None:
    m = re.compile(_CLOCK).match(text, start)
    if m is None:
        return None
    hour = number(m.group(2))
    if hour is None or hour > 23:
        return None
    minute_text = (m.group(3) or "").removesuffix("分")
    minute = 30 if minute_text == "半" else (number(minute_text) or 0) if minute_text else 0
    if minute > 59:
        return None
    if m.group(1) in ("下午", "晚上", "傍晚") and hour < 12:
        hour += 12
    return time(hour, minute), m.end()


def find(text: str, today: date) -> list[Found]:
    """Every date expression in ``text``, ranges joined ("周三到周五", "12月9日-11日", "9号到11号"), a duration
    after a start ("下周三去杭州出差三天") made a span, a time of day after a day kept, and a yearly date
    marked where the words say so (生日, 纪念日, 每年)."""
    items = list(_scan(text, today))
    joined: list[Found] = []
    i = 0
    while i < len(items):
        item = items[i]
        if i + 1 < len(items) and item.when is not None:
            nxt = items[i + 1]
            gap = text[item.end:nxt.start]
            if nxt.when is not None and _RANGE_JOIN.fullmatch(gap):
                end = nxt.when.ends or nxt.when.on
                if end < item.when.on and item.when.on - end < timedelta(days=7):
                    end += timedelta(days=7)  # 周五到周一: the Monday after, not the one before
                if end >= item.when.on:
                    item = Found(item.start, nxt.end, When(on=item.when.on, ends=end), item.relative or nxt.relative)
                    i += 1
        joined.append(item)
        i += 1
    # "12月9日-11日": the end is a bare day of the same month.
    result: list[Found] = []
    for item in joined:
        if item.when is not None and item.when.ends is None:
            tail = re.compile(r"\s*(?:到|至|-|－|~|～)\s*(" + _NUM + r")[号日]").match(text, item.end)
            if tail:
                day = number(tail.group(1))
                last = _safe_date(item.when.on.year, item.when.on.month, day) if day else None
                if last is not None and last > item.when.on:
                    item = replace(item, end=tail.end(), when=replace(item.when, ends=last))
        if item.when is not None and item.when.ends is None:
            when = item.when
            clock = _clock(text, item.end)
            if clock is not None:
                when = replace(when, at=clock[0])
                item = replace(item, end=clock[1], when=when)
            duration = _DURATION.match(text, item.end)
            days = number(duration.group(1)) if duration else None
            if days is not None and 2 <= days <= 60:
                item = replace(item, when=replace(when, ends=when.on + timedelta(days=days - 1)), said=when)
        result.append(item)
    if _YEARLY.search(text):
        result = [f if f.when is None or f.relative else replace(f, when=replace(f.when, yearly=True, ends=None))
                  for f in result]
    return result


@dataclass(frozen=True, slots=True)
class Dated:
    """Words with their date as data: ``when`` the first date they name (None: no date, or only an
    impossible one: then ``impossible`` is True), ``text`` with each relative date word that would go stale
    replaced by the date it names ("下周三去杭州" → "12月9日（周三）去杭州"; 5月20号 stays as it is)."""

    text: str
    when: When | None
    impossible: bool = False


def resolve(text: str, today: date) -> Dated:
    found = find(text, today)
    if not found:
        return Dated(text, None)
    first = next((f for f in found if f.when is not None), None)
    impossible = first is None
    kept = text
    for item in sorted(found, key=lambda f: f.start, reverse=True):
        if item.relative and item.when is not None:
            kept = kept[:item.start] + item.absolute + kept[item.end:]
    return Dated(kept, None if first is None else first.when, impossible)


def question_range(text: str, today: date) -> tuple[date, date] | None:
    """The days a question about time asks after ("我这周哪天练吉他来着" → this week, "明天要干嘛" → tomorrow,
    "下周有什么安排" → next week, "上次去上海是什么时候" → the last 90 days); None when the turn asks no such
    thing. The time and the question must stand in one clause: "明天天气不错" names a day but asks nothing,
    and "今天天气真好……不知道他们在忙些什么" asks about something else."""
    for clause in _CLAUSES.split(text):
        if not _ASKS.search(clause):
            continue
        found = [f for f in find(clause, today) if f.when is not None]
        if found:
            when = found[0].when
            assert when is not None
            return when.on, last_day(when)
        if _LAST_TIME.search(clause):
            return today - timedelta(days=90), today
        if _PLANS.search(clause) and _INTERROGATIVE.search(clause):  # "最近有什么安排", not "得安排一下"
            return today, today + timedelta(days=14)
    return None


_CLAUSES = re.compile(r"[，,。.！!；;\n]+|(?<=[？?])")
_ASKS = re.compile(r"哪天|哪一天|几号|什么时候|啥时候|何时|安排|计划|要干嘛|要做什么|干什么|做什么|有什么事|有啥事|"
                   r"忙什么|日程|行程|来着")
_LAST_TIME = re.compile(r"上次|上一次|最近一次")
_PLANS = re.compile(r"安排|计划|日程|行程")
_INTERROGATIVE = re.compile(r"什么|啥|吗|么|哪")
