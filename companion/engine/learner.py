"""What the model is asked to learn: memories and today's events from queued turns, the tier of an
explicit save, and a conversation's summary. Produces drafts; storing them is the writer's job.
Raises LLMError when the model cannot answer (the judging of a save falls back to the words as given)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo

import prompts
from companion.core import dates, tiers
from companion.core.errors import LLMError
from companion.core.extraction import clean_keywords, parse_extraction, parse_today
from companion.core.models import WEEKDAYS, Memory, MemoryDraft, MemoryType, Recalled, Scope, Tier, Turn, Validity
from companion.core.text import normalize_text
from companion.core.timeutil import local_date, show
from companion.engine.saving import guess_draft, parse_saved
from companion.llm.jsonmodel import JsonModel
from companion.recall.index import Tokenize
from companion.storage.base import MemoryStore

log = logging.getLogger(__name__)

SUMMARY_CHARS = 50
MAX_RELATED = 12  # stored memories shown to an extraction, to spot contradictions


async def related(store: MemoryStore, scope: Scope, touched: Sequence[Recalled]) -> dict[int, Memory]:
    """Stored memories the turns may contradict, shown to the extraction with their handles: those the
    turns touch, then names, standing instructions and core facts, which news most often replaces even
    in other words."""
    found = {r.memory.id: r.memory for r in touched}
    for memory in await store.fetch_memories(scope):
        if len(found) >= MAX_RELATED:
            break
        if memory.type is MemoryType.INSTRUCTION or memory.tier is Tier.LONG:
            found.setdefault(memory.id, memory)
    return found


def dated_today(now: datetime, tz: tzinfo) -> str:
    """Today for a prompt: the date and its weekday, so "下周三" can be worked out (2026-12-04（周五）)."""
    local = now.astimezone(tz)
    return f"{local.strftime('%Y-%m-%d')}（周{WEEKDAYS[local.weekday()]}）"


class Learner:
    def __init__(self, llm: JsonModel | None, keywords: Tokenize, tz: tzinfo) -> None:
        self.llm = llm
        self._keywords = keywords
        self._tz = tz

    async def extract(
        self, turns: Sequence[Turn], known: Mapping[int, Memory], now: datetime, *, profile: str = ""
    ) -> tuple[list[MemoryDraft], list[str], object]:
        """Memories (each in the tier its nature calls for, sourced from the last turn), today's small
        events told in the turns, and the answer's "profile" (None when absent): ``profile`` is the prompt's
        part asking for one (``ProfileService.ask_with_extraction``). ``known`` are the stored memories shown
        with their handles: only those may be superseded."""
        if self.llm is None:
            raise RuntimeError("extraction needs an LLM client")
        listed = "\n".join(f"[{mid}] {m.shown}" for mid, m in known.items()) or "（无）"
        # "今天" for the model is the day the turns were said (the last one's), as the code reads their words.
        prompt = prompts.render("extract", today=dated_today(turns[-1].at, self._tz), known=listed, profile=profile,
                                turns=self.format_turns(turns))
        data = await self.llm.json([{"role": "user", "content": prompt}], purpose="extraction")
        last = turns[-1]
        # Relative words are read against the day they were said: turns queued on Monday and learned on
        # Friday still mean Monday's "周四".
        drafts = parse_extraction(data, self._keywords, local_date(last.at, self._tz))
        for draft in drafts:
            # The tier its nature calls for, judged as an explicit save is; the model's validity stays.
            draft.tier = tiers.initial_tier(draft.type, draft.importance, validity=draft.validity)
            draft.source_at = last.at
            draft.source_chat_id, draft.source_message_id = last.chat_id, last.message_id
            if draft.supersedes not in known:
                draft.supersedes = None  # only a memory the model was shown, so only this scope's
        return drafts, parse_today(data), data.get("profile") if profile else None

    async def judge(self, text: str, now: datetime) -> MemoryDraft:
        """An explicit save: the model judges type, tier and importance; without it the words are kept."""
        told = now.astimezone(self._tz).date()
        if self.llm is None:
            return guess_draft(text, self._keywords, told)
        prompt = prompts.render("save", today=dated_today(now, self._tz), text=text)
        try:
            data = await self.llm.json([{"role": "user", "content": prompt}], purpose="save")
        except LLMError as exc:
            log.warning("save without the model's judgement: %s", exc)
            return guess_draft(text, self._keywords, told)
        return parse_saved(data, text, self._keywords, told)

    async def summary(self, turns: Sequence[Turn], now: datetime) -> MemoryDraft | None:
        """A short-term draft summing up a conversation that had something worth keeping, or None."""
        if self.llm is None or not turns:
            return None
        prompt = prompts.render("summary", today=dated_today(now, self._tz), turns=self.format_turns(turns))
        data = await self.llm.json([{"role": "user", "content": prompt}], purpose="summary")
        summary = data.get("summary")
        if not isinstance(summary, str) or not normalize_text(summary):
            return None
        # The day it was said is the memory's creation time; a day the summary names is its date.
        dated = dates.resolve(normalize_text(summary), now.astimezone(self._tz).date())
        return MemoryDraft(event=dated.text[:SUMMARY_CHARS],
                           keywords=clean_keywords(data.get("keywords")), importance=40.0,
                           validity=Validity.DAYS_7, tier=Tier.SHORT, source_at=now, happens=dated.when)

    def format_turns(self, turns: Sequence[Turn]) -> str:
        lines: list[str] = []
        for turn in turns:
            lines.append(f"[{show(turn.at, self._tz)}] 用户：{turn.user}")
            if turn.reply:
                lines.append(f"聊天伙伴：{turn.reply}")
        return "\n".join(lines)
