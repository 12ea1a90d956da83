"""The operator's memory table lines Chinese columns up by display width."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from companion.core.models import Memory, MemoryType, Origin, Validity
from companion.ops.admin.table import clip, memories_table, width

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "cells"), [("abc", 3), ("感冒", 4), ("感冒a", 5), ("（）", 4), ("é", 1), ("", 0)])
def test_width(text: str, cells: int) -> None:
    assert width(text) == cells


def test_long_text_is_clipped_to_its_cells() -> None:
    clipped = clip("很" * 50, 10)
    assert width(clipped) <= 10 and clipped.endswith("…")
    assert clip("多行\n文本") == "多行 文本"


def test_columns_line_up_with_chinese_text() -> None:
    def mem(mid: int, event: str) -> Memory:
        return Memory(id=mid, event=event, keywords=["词"], importance=50.0, created_at=NOW,
                      validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=NOW, expires_at=None,
                      type=MemoryType.EVENT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=NOW)

    lines = memories_table([mem(1, "感冒发烧"), mem(22, "likes tea"), mem(333, "对花生过敏，一直都是")],
                           ZoneInfo("Asia/Shanghai")).splitlines()
    # The column after the event starts at the same display cell on every line.
    starts = {width(line[: line.index("词")]) for line in lines[1:]}
    assert len(starts) == 1
