"""What the chat service is configured with (``ChatConfig``, from the settings) and what one turn gives
back to the handlers (``Reply``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta, tzinfo
from zoneinfo import ZoneInfo

from companion.config.settings import Settings
from companion.core.models import Memory
from companion.llm.loop import LoopLimits


@dataclass(frozen=True, slots=True)
class ChatConfig:
    history_turns: int = 10
    recall_max_rate: float = 0.2
    extract_every_min: int = 8
    extract_every_max: int = 12
    important_keywords: tuple[str, ...] = ()
    review_unanswered: timedelta = timedelta(days=3)
    idle_summary_seconds: float = 300.0
    tz: tzinfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))
    tools_enabled: bool = True
    tool_limits: LoopLimits = field(default_factory=LoopLimits)

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatConfig:
        low, high = sorted((settings.extract_every_min, settings.extract_every_max))
        return cls(
            history_turns=settings.history_turns,
            recall_max_rate=settings.recall_max_rate,
            extract_every_min=low,
            extract_every_max=high,
            important_keywords=tuple(settings.important_keywords),
            tz=settings.tz,
            review_unanswered=timedelta(days=settings.review_unanswered_days),
            idle_summary_seconds=settings.idle_summary_minutes * 60,
            tools_enabled=settings.llm_tools_enabled,
        )


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    ok: bool
    recalled: tuple[int, ...] = ()
    mentioned: tuple[int, ...] = ()
    saved: Memory | None = None  # a receipt: the handlers offer fine / edit / forget
    replaced: Memory | None = None  # the words the save replaced: the handlers offer an undo
    to_forget: tuple[Memory, ...] = ()  # forget candidates: the handlers ask for a confirmation
    forget_all: int | None = None  # "全部忘掉": the handlers ask to confirm forgetting this many and the rest
    tool_calls: int = 0
