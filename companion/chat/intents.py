"""What a message asks of the memory, read from its words: remember this, forget that, or an answer to
pending review suggestions. Pure functions over text; the pipeline acts on the result.

Deliberately conservative: a message is a request only when it starts with (or is) one of the phrasings
people use for it, so ordinary talk ("我记住了你说的") never turns into a save.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from companion.core.tiers import Action


class Kind(StrEnum):
    SAVE = "save"  # remember ``text``
    SAVE_PREVIOUS = "save_previous"  # "这个很重要": remember what the user said just before
    FORGET = "forget"  # forget what matches ``text``
    FORGET_ALL = "forget_all"  # "全部忘掉": everything, as ``/forget all``


@dataclass(frozen=True, slots=True)
class Intent:
    kind: Kind
    text: str = ""


_SAVE = re.compile(
    r"^(?:请|帮我|你)?(?:记住|记一下|记下来?|记好了?|别忘了|不要忘了|写下来)[:：，,\s]*(?P<text>.+)$"
    r"|^(?:remember(?: this| that)?)[:：,\s]+(?P<en>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_SAVE_PREVIOUS = re.compile(
    r"^(?:这个|这件事|这点|刚才说的|上面说的|那个)?(?:很|非常|特别)?(?:重要|要记住|要记好)[!！。.~～]*$"
    r"|^(?:把这个|把它|把这)(?:写下来|记下来|记住)[!！。.~～]*$|^remember (?:this|that)[!.]*$",
    re.IGNORECASE,
)
_FORGET = re.compile(
    r"^(?:请|帮我|你)?(?:忘掉|忘记|忘了|删掉|删除|别记着?|不要记着?)(?:关于)?(?P<text>.+?)"
    r"(?:[,，。]?(?:以后)?(?:别|不要)再?提了?[!！。]*)?$"
    r"|^forget (?:about )?(?P<en>.+)$",
    re.IGNORECASE | re.DOTALL,
)
# "全部忘掉" / "把我的事全部忘掉" / "忘掉所有记忆": everything, as /forget all. A bare "都忘了" is left out
# on purpose ("我全都忘了" is the user forgetting, not a request).
_FORGET_ALL = re.compile(
    r"^(?:请|帮我|你)?(?:把)?(?:关于我的|我的|我说的)?(?:事情?|记忆|话)?(?:全部|统统|所有的?|一切)(?:的)?(?:记忆|事情?)?"
    r"(?:都|全)?(?:忘掉|忘记|删掉|删除|清掉|清空)(?:吧|了)?[!！。.~～]*$"
    r"|^(?:请|帮我|你)?(?:忘掉|忘记|删掉|删除|清空)(?:关于我的|我的)?(?:全部|所有|一切)(?:的)?(?:记忆|事情?)?(?:吧|了)?[!！。.~～]*$"
    r"|^forget (?:everything|all)(?: about me)?[!.]*$",
    re.IGNORECASE,
)
_FILLER = re.compile(r"^(?:我的|我|那个|这个)|(?:的事情?|的那件事)?了?(?:吧|哦|啊|呀|好吗|好不好)?[!！。.~～]*$")


def read_intent(text: str) -> Intent | None:
    stripped = text.strip()
    if _SAVE_PREVIOUS.match(stripped):
        return Intent(Kind.SAVE_PREVIOUS)
    match = _SAVE.match(stripped)
    if match:
        body = (match.group("text") or match.group("en") or "").strip()
        if len(body) >= 2:
            return Intent(Kind.SAVE, body)
    if _FORGET_ALL.match(stripped):
        return Intent(Kind.FORGET_ALL)
    match = _FORGET.match(stripped)
    if match:
        body = _FILLER.sub("", (match.group("text") or match.group("en") or "").strip()).strip()
        if body:
            return Intent(Kind.FORGET, body)
    return None


# ---- answers to review suggestions ---------------------------------------------------------------

_AS_SUGGESTED = re.compile(
    r"^(?:就)?(?:按你说的|按建议|照你说的|听你的|就这样|好的?|可以|行)(?:办|做|处理)?吧?[!！。]*$"
)
_ORDINALS = {"一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_STEP = re.compile(
    r"第?(?P<n>[一二两三四五六七八九十\d]+)(?:个|条)?"
    r"(?P<verb>升级|升|提升|保留|留着|留下|不变|归档|收起|删除|删掉|删|忘掉|忘记)"
)
_VERBS = {
    "升级": Action.PROMOTE, "升": Action.PROMOTE, "提升": Action.PROMOTE,
    "保留": Action.KEEP, "留着": Action.KEEP, "留下": Action.KEEP, "不变": Action.KEEP,
    "归档": Action.ARCHIVE, "收起": Action.ARCHIVE,
    "删除": Action.FORGET, "删掉": Action.FORGET, "删": Action.FORGET, "忘掉": Action.FORGET, "忘记": Action.FORGET,
}


def read_review_answer(text: str, suggested: list[Action]) -> list[Action] | None:
    """The action per pending memory, in order, or None if the message does not answer the review.
    "按你说的办" takes every suggestion; "第一个升级，第二个删除" sets those two and keeps the others'
    suggestions."""
    stripped = text.strip()
    if not suggested:
        return None
    if _AS_SUGGESTED.match(stripped):
        return list(suggested)
    steps = list(_STEP.finditer(stripped))
    if not steps:
        return None
    answer = list(suggested)
    for step in steps:
        raw = step.group("n")
        number = int(raw) if raw.isdigit() else _ORDINALS.get(raw, 0)
        if 1 <= number <= len(answer):
            answer[number - 1] = _VERBS[step.group("verb")]
    return answer
