"""Whether two tellings that look alike are one fact or two.

Merging is for the same fact retold. Two texts that share most of their words are still two facts when
they differ in a day ("周二"/"周四", "明天"/"后天", dates), a number ("3点"/"5点", "第1个"/"第2个",
amounts), a name or person ("小王"/"小李", "我"/"我妈妈") or a negation ("喜欢"/"不喜欢", "会"/"不会").
A detail added on one side ("我养了一只猫" / "我养了一只猫，三岁了") is a retelling; a detail changed is a
different fact. The rule is conservative: every doubt keeps two memories.

Pure functions: no database, no clock.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache


class Difference(StrEnum):
    DAY = "day"
    NUMBER = "number"
    NAME = "name"
    NEGATION = "negation"
    WORD = "word"  # one word swapped for another in the same place ("养了一只猫"/"养了一只狗")


@dataclass(frozen=True, slots=True)
class Markers:
    """What tells one fact from another in a text: days, numbers, names, persons and negations."""

    days: frozenset[str]
    numbers: frozenset[str]
    names: frozenset[str]
    persons: frozenset[str]
    negated: frozenset[str]  # the first character of each negated word ("不喜欢" -> "喜")
    plain: frozenset[str]  # characters said without a negation
    rest: str  # the words without punctuation, with days, persons and numbers masked


_DATE_PREFIX = re.compile(r"^\s*\d{4}-\d{1,2}-\d{1,2}\s*")  # the day an extraction learned it, not the fact's
_CN_DIGITS = "零〇一二两三四五六七八九"
_CN = f"[{_CN_DIGITS}十百千万]"
_NUM = rf"(?:\d+|{_CN}+)"
_WEEKDAYS = {"一": "1", "二": "2", "三": "3", "四": "4", "五": "5", "六": "6", "日": "7", "天": "7", "末": "末",
             "1": "1", "2": "2", "3": "3", "4": "4", "5": "5", "6": "6", "7": "7"}
_RELATIVE = {"这": "", "本": "", "今": "", "": "", "下": "下", "上": "上", "下下": "下下", "上上": "上上", "每": "每"}
_WEEKDAY = re.compile(rf"(?<![{_CN_DIGITS}\d])(上上|下下|上|下|这|本|每)?个?(?:周|星期|礼拜)([一二三四五六日天末1-7])")
_WEEK_OR_MONTH = re.compile(r"(上上|下下|上|下|这|本)个?(周|星期|礼拜|月)")
_DAY_WORDS = {
    "大后天": ("+3",), "后天": ("+2",), "明天": ("+1",), "明日": ("+1",), "明儿": ("+1",), "今天": ("0",),
    "今日": ("0",), "今儿": ("0",), "昨天": ("-1",), "昨日": ("-1",), "前天": ("-2",), "大前天": ("-3",),
    "今晚": ("0", "晚上"), "明晚": ("+1", "晚上"), "昨晚": ("-1", "晚上"), "今早": ("0", "早上"),
    "明早": ("+1", "早上"), "今年": ("年0",), "明年": ("年+1",), "去年": ("年-1",), "前年": ("年-2",),
}
_PARTS_OF_DAY = {"凌晨": "凌晨", "早上": "早上", "早晨": "早上", "清晨": "早上", "上午": "上午", "中午": "中午",
                 "下午": "下午", "傍晚": "傍晚", "晚上": "晚上", "夜里": "晚上", "半夜": "凌晨"}
_DAY_WORD = re.compile("|".join(sorted([*_DAY_WORDS, *_PARTS_OF_DAY], key=len, reverse=True)))
_DN = rf"(?:\d{{1,2}}|{_CN}{{1,3}})"
_DATE = re.compile(rf"(?:(\d{{4}})[-/年.])?({_DN})(?:月|/)({_DN})[日号]?|({_DN})[日号]|({_DN})月")
_CLOCK = re.compile(r"(\d{1,2})[:：](\d{2})")
# Numerals inside words that count nothing ("一直", "十分", "万一").
_NOT_NUMBERS = re.compile(
    "一直|一起|一样|一些|一下子|一下|一点点|一点儿|一定|一般|一切|一向|一旦|一边|一面|一会儿|一会|一阵|万一|唯一|"
    "统一|一致|一再|一心|一同|一路|一辈子|一生|十分|万分|百分百|一模一样|乱七八糟|一口气|一块儿")
_UNIT = "个只条头匹位名件张本次遍回天日号周月年岁点分秒块元斤公里米层楼杯瓶碗顿节倍人口家小时钟"  # 小: 小时
_NUMBER = re.compile(rf"(第)?(\d+(?:\.\d+)?|{_CN}+)(点半|[{_UNIT}]?)")
_UNITS = {"只": "个", "条": "个", "头": "个", "匹": "个", "位": "个", "名": "个", "件": "个", "张": "个", "本": "个",
          "块": "元", "日": "天", "号": "天", "遍": "次", "回": "次", "钟": "点", "小": "时"}
_SURNAMES = set(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程苏魏吕丁任沈姚卢"
    "姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝龚邵万钱严覃武戴莫孔向汤"
    "明红丽华芳美强伟军杰")
_NAME = re.compile(r"([小老阿])([\u4e00-\u9fff])")
_TITLED = re.compile(r"([\u4e00-\u9fff])(总|哥|姐|医生|经理|大夫|律师|教授)")  # 张总; 老师 is a person
_NOT_NAME_AFTER_A = set("姨婆公里胶拉富尔根联森斯")
_CALLED = re.compile(r"(?:叫做|叫作|名字是|名叫|叫)(?![我你他她它])([\u4e00-\u9fffA-Za-z]{1,3}?)"
                     r"(?=[的了吧呢啊呀是和跟，。,.!！?？、；;\s]|$)")
_PERSONS = ("女朋友", "男朋友", "老婆", "老公", "妻子", "丈夫", "对象", "妈妈", "爸爸", "母亲", "父亲", "儿子",
            "女儿", "孩子", "哥哥", "姐姐", "弟弟", "妹妹", "爷爷", "奶奶", "外公", "外婆", "同事", "朋友", "室友",
            "老板", "领导", "老师", "同学", "邻居", "闺蜜", "舅舅", "阿姨", "叔叔", "我妈", "我爸")
_PERSON = re.compile("|".join(sorted(_PERSONS, key=len, reverse=True)))
_PERSON_NAMES = {"我妈": "妈妈", "母亲": "妈妈", "我爸": "爸爸", "父亲": "爸爸", "妻子": "老婆", "丈夫": "老公"}
# Words with 不/没 that deny nothing ("不错", "差不多") or deny twice ("不得不").
_NOT_NEGATIONS = re.compile("不错|不过|不少|不断|不久|不管|不然|要不|差不多|对不起|了不起|不好意思|没事|没关系|"
                            "忍不住|不得不|不停|不住|受不了|不仅|不光|不但|不如|不禁|别的|别人|特别|区别|分别|告别|性别|级别|"
                            "类别|未来")
_NEGATOR = re.compile("从来没有|从来不|从没|从不|没有|不再|无法|别|没|不|甭|未")
_SOFTENERS = "太再怎很是大会能想要用必"  # "不太喜欢": the denied word is the one after the softener
_OPPOSITES = (("喜欢", "讨厌"), ("爱吃", "讨厌"), ("爱", "恨"))
_CJK = re.compile(r"[\u4e00-\u9fff]")
_WORDS_ONLY = re.compile(r"[\W_]+", re.UNICODE)
MAX_SWAPPED = 3


def core_text(event: str) -> str:
    """The words that carry the fact: no learned-on date prefix, compatibility forms folded (full-width
    digits), no spaces."""
    text = unicodedata.normalize("NFKC", _DATE_PREFIX.sub("", event))
    return re.sub(r"\s+", "", text)


@lru_cache(maxsize=16_384)
def markers(event: str) -> Markers:
    """Days, then persons and names, then numbers are read and masked in turn, so "周三" is a day and not
    the number 3, and "我妈" a person and not a name."""
    text = core_text(event)
    days: set[str] = set()
    for match in _WEEKDAY.finditer(text):
        days.add(f"周{_RELATIVE[match.group(1) or '']}{_WEEKDAYS[match.group(2)]}")
    text = _WEEKDAY.sub("·", text)
    for match in _WEEK_OR_MONTH.finditer(text):
        days.add(f"{match.group(2)[0]}{_RELATIVE[match.group(1)]}")
    text = _WEEK_OR_MONTH.sub("·", text)
    for match in _DATE.finditer(text):
        if match.group(4) is not None:
            days.add(f"日{to_number(match.group(4)):g}")
        elif match.group(5) is not None:
            days.add(f"月{to_number(match.group(5)):g}")
        else:
            days.add(f"{match.group(1) or ''}月{to_number(match.group(2)):g}日{to_number(match.group(3)):g}")
    text = _DATE.sub("·", text)
    for match in _DAY_WORD.finditer(text):
        word = match.group(0)
        days.update(_DAY_WORDS.get(word, ()) or (_PARTS_OF_DAY[word],))
    text = _DAY_WORD.sub("·", text)

    persons = {_PERSON_NAMES.get(m.group(0), m.group(0)) for m in _PERSON.finditer(text)}
    text = _PERSON.sub("·", text)
    names = {m.group(1) for m in _CALLED.finditer(text)}
    for match in _NAME.finditer(text):
        prefix, char = match.groups()
        if char in _SURNAMES or (prefix == "阿" and char not in _NOT_NAME_AFTER_A and char not in _CN_DIGITS):
            names.add(prefix + char)
    names.update(m.group(0) for m in _TITLED.finditer(text) if m.group(1) in _SURNAMES)

    numbers: set[str] = set()
    clean = _NOT_NUMBERS.sub("·", text)
    for match in _CLOCK.finditer(clean):
        numbers.add(f"{int(match.group(1)) + int(match.group(2)) / 60:g}点")
    clean = _CLOCK.sub("·", clean)
    for match in _NUMBER.finditer(clean):
        ordinal, value, unit = match.groups()
        if unit == "点半":
            numbers.add(f"{(ordinal or '')}{to_number(value) + 0.5:g}点")
            continue
        unit = _UNITS.get(unit, unit)
        numbers.add(f"{ordinal or ''}{to_number(value):g}{unit}")

    negated, plain = _negations(text)
    for yes, no in _OPPOSITES:
        if no in text:
            negated.add(yes[0])
    rest = _WORDS_ONLY.sub("", _NUMBER.sub("·", clean))
    return Markers(frozenset(days), frozenset(numbers), frozenset(names), frozenset(persons), frozenset(negated),
                   frozenset(plain), rest)


def _negations(text: str) -> tuple[set[str], set[str]]:
    """The first character of each denied word, and every character said without a denial."""
    text = _NOT_NEGATIONS.sub("·", text)
    negated: set[str] = set()
    denied_at: set[int] = set()
    for match in _NEGATOR.finditer(text):
        at = match.end()
        denied_at.update(range(match.start(), at))
        while at < len(text) and text[at] in _SOFTENERS and at + 1 < len(text) and _CJK.match(text[at + 1]):
            denied_at.add(at)
            at += 1
        if at < len(text) and _CJK.match(text[at]):
            negated.add(text[at])
            denied_at.update(range(at, min(at + 2, len(text))))
    plain = {ch for i, ch in enumerate(text) if i not in denied_at and _CJK.match(ch)}
    return negated, plain


def to_number(text: str) -> float:
    """"3", "十二", "二十五", "两百", "二〇二六" as numbers."""
    if text.replace(".", "", 1).isdigit():
        return float(text)
    digits = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
    if all(c in digits for c in text):
        return float("".join(str(digits[c]) for c in text))
    total, section, current = 0, 0, 0
    for char in text:
        if char in digits:
            current = digits[char]
        elif char == "万":
            total += (section + current) * 10_000
            section, current = 0, 0
        else:
            unit = {"十": 10, "百": 100, "千": 1000}[char]
            section += (current or 1) * unit
            current = 0
    return float(total + section + current)


def _changed(a: Iterable[str], b: Iterable[str]) -> bool:
    """Each side says something of this kind the other does not: a detail changed, not added."""
    set_a, set_b = set(a), set(b)
    return bool(set_a - set_b) and bool(set_b - set_a)


def difference(a_event: str, b_event: str) -> Difference | None:
    """What makes two tellings two different facts, or None when nothing tells them apart."""
    a, b = markers(a_event), markers(b_event)
    if _changed(a.days, b.days):
        return Difference.DAY
    if _changed(a.numbers, b.numbers):
        return Difference.NUMBER
    # A person on one side only ("我妈妈对花生过敏" / "我对花生过敏") is someone else's fact.
    if _changed(a.names, b.names) or a.persons != b.persons:
        return Difference.NAME
    if (a.negated & b.plain) - b.negated or (b.negated & a.plain) - a.negated:
        return Difference.NEGATION
    if _swapped(a.rest, b.rest):
        return Difference.WORD
    return None


def _swapped(a: str, b: str) -> bool:
    """The same sentence with one short word replaced by another: a retelling adds or drops words, it does
    not swap one ("我养了一只猫"/"我养了一只狗", "老板张总"/"老板刘总")."""
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    left, right = a[start:len(a) - end], b[start:len(b) - end]
    if not left or not right or len(left) > MAX_SWAPPED or len(right) > MAX_SWAPPED:
        return False  # words added or dropped, or more than one word changed
    if start + end < max(2, len(left) + 1, len(right) + 1):
        return False  # too little sentence around them to call it the same one
    return left not in right and right not in left
