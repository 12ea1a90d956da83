"""An explicit "remember this": the model's judgement of one sentence, validated, with a fallback that
needs no model (a save must never fail because the model is down)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date

from companion.core import dates, rules, tiers
from companion.core.extraction import clean_keywords
from companion.core.models import MemoryDraft, MemoryType, Origin
from companion.core.text import MAX_MEMORY_CHARS, normalize_text

MAX_SAVED_CHARS = MAX_MEMORY_CHARS
_INSTRUCTION = re.compile(r"(别|不要|不用|请|以后).{0,12}(回复|回我|叫我|称呼|表情|打扰|提|说|发)|^叫我")
_PREFERENCE = re.compile(r"喜欢|爱吃|爱喝|讨厌|不喜欢|最爱|偏好|习惯")
_CORE = re.compile(r"叫我|名字|生日|过敏|每周|每天|永远|一直")

Segmenter = Callable[[str], list[str]]


def guess_draft(text: str, segment: Segmenter, told: date | None = None) -> MemoryDraft:
    """Without the model: the user's words as they are (relative date words made a date), a type from a few
    cue words."""
    said = normalize_text(text)
    if _INSTRUCTION.search(said):
        mtype = MemoryType.INSTRUCTION
    elif _PREFERENCE.search(said):
        mtype = MemoryType.PREFERENCE
    else:
        mtype = MemoryType.FACT
    dated = dates.resolve_for(mtype, said, told) if told is not None else dates.Dated(said, None)
    event = dated.text[:MAX_SAVED_CHARS]
    importance = 70.0
    tier = tiers.initial_tier(mtype, importance, core=bool(_CORE.search(event)))
    return MemoryDraft(event=event, keywords=clean_keywords(segment(event)), importance=importance,
                       validity=tiers.VALIDITY_OF[tier], type=mtype, origin=Origin.EXPLICIT, tier=tier,
                       happens=dated.when, date_unclear=dated.impossible)


def parse_saved(data: dict[str, object], text: str, segment: Segmenter, told: date | None = None) -> MemoryDraft:
    """The model's answer for one saved sentence; any field it got wrong falls back to the guess. For a type
    that happens on days (``dates.has_days``) the day is read from the user's own words first (the rules of
    ``core.dates`` are exact for what they know), then from the model's ``date``; relative date words in the
    stored words become the date either way."""
    fallback = guess_draft(text, segment, told)
    try:
        mtype = MemoryType(str(data.get("type", "")).strip().lower())
    except ValueError:
        mtype = fallback.type
    event = data.get("event")
    event = normalize_text(event) if isinstance(event, str) and event.strip() else normalize_text(text)
    happens = None
    unclear = False
    if told is not None and dates.has_days(mtype):
        said = dates.resolve(normalize_text(text), told)
        own = dates.resolve(event, told)
        event, happens = own.text, said.when or dates.model_when(data, told) or own.when
        unclear = said.impossible and happens is None
    event = event[:MAX_SAVED_CHARS]
    raw = data.get("importance")
    importance = (rules.clamp_importance(float(raw)) if isinstance(raw, int | float) and not isinstance(raw, bool)
                  else fallback.importance)
    core = data.get("core") is True
    tier = tiers.initial_tier(mtype, importance, core=core)
    keywords = clean_keywords(data.get("keywords")) or clean_keywords(segment(event))
    return MemoryDraft(event=event, keywords=keywords, importance=importance, validity=tiers.VALIDITY_OF[tier],
                       type=mtype, origin=Origin.EXPLICIT, tier=tier, happens=happens, date_unclear=unclear)
