"""The plugin's settings as AstrBot's WebUI edits them (``_conf_schema.json``), bounded, and the engine
config they give. A missing or malformed value falls back to its default: a bad setting never stops the
plugin from loading."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from memory import EngineConfig


@dataclass(frozen=True, slots=True)
class Options:
    capacity: int = 200
    inject_limit: int = 10
    recall_limit: int = 3
    tools: bool = True
    learning: bool = True
    profile: bool = True  # the speaker's profile, rebuilt from their memories by AstrBot's provider
    learn_every: int = 4  # finished exchanges queued before one extraction
    decay: bool = True
    backup_time: time = time(3, 30)
    backup_keep: int = 7
    timezone: str = "Asia/Shanghai"
    semantic: bool = True  # the built-in model in AstrBot's own process, where its wheel installs
    embedding_base_url: str = ""
    embedding_model: str = ""
    embedding_api_key: str = ""
    followups: bool = True  # write first about a told event once it is over, where the platform lets the bot
    followup_hours: str = "10-21"  # the local hours follow-ups written first may go out in

    @classmethod
    def read(cls, raw: Mapping[str, Any] | None) -> Options:
        raw = raw or {}
        default = cls()

        def number(key: str, low: int, high: int) -> int:
            value = raw.get(key, getattr(default, key))
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                return int(getattr(default, key))
            try:
                return max(low, min(high, int(value)))
            except ValueError:
                return int(getattr(default, key))

        def flag(key: str) -> bool:
            value = raw.get(key, getattr(default, key))
            return value if isinstance(value, bool) else bool(getattr(default, key))

        def text(key: str) -> str:
            value = raw.get(key, getattr(default, key))
            return value.strip() if isinstance(value, str) else str(getattr(default, key))

        zone = text("timezone")
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            zone = default.timezone
        return cls(
            capacity=number("capacity", 10, 5000), inject_limit=number("inject_limit", 0, 30),
            recall_limit=number("recall_limit", 0, 10), tools=flag("tools"), learning=flag("learning"),
            profile=flag("profile"),
            learn_every=number("learn_every", 1, 50), decay=flag("decay"),
            backup_time=_clock_time(text("backup_time"), default.backup_time),
            backup_keep=number("backup_keep", 0, 365), timezone=zone,
            semantic=flag("semantic"), embedding_base_url=text("embedding_base_url"),
            embedding_model=text("embedding_model"), embedding_api_key=text("embedding_api_key"),
            followups=flag("followups"),
            followup_hours=text("followup_hours") if _hours(text("followup_hours")) else default.followup_hours,
        )

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def hours(self) -> tuple[int, int]:
        """``followup_hours`` as (first, end) local hours."""
        return _hours(self.followup_hours) or (10, 21)

    @staticmethod
    def database_url(data_dir: Path) -> str:
        """The plugin's store, spelled as the bot's ``DATABASE_URL`` (SQLite's file in the plugin's data folder)."""
        return f"sqlite:///{data_dir / 'memory.sqlite3'}"

    def engine_config(self, *, builtin: bool = False) -> EngineConfig:
        """``builtin``: the built-in model is the one in use (its cosines put any two sentences close, so a
        scope too small to measure them recalls nothing by meaning alone)."""
        from companion.engine.retrievers import DensePolicy
        from memory import EngineConfig  # the engine loads when the plugin first needs it, not at load

        dense = DensePolicy(floor_decides_small_scopes=not builtin)
        return EngineConfig(recall_max=self.recall_limit, capacity=self.capacity, tz=self.tz, dense=dense)


def _hours(value: str) -> tuple[int, int] | None:
    """"10-21" (or "10,21"): two local hours, the first before the second; None for anything else."""
    match = re.fullmatch(r"\s*(\d{1,2})\s*[-,]\s*(\d{1,2})\s*", value)
    if match is None:
        return None
    start, end = int(match.group(1)), int(match.group(2))
    return (start, end) if 0 <= start < end <= 24 else None


def _clock_time(value: str, default: time) -> time:
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", value)
    return time(int(match.group(1)), int(match.group(2))) if match else default
