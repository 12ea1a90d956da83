"""Hints to people outside companion mode are rate-limited: the pure rule, the bounded gate, and 50
messages a second through the real dispatcher getting one hint (in a private chat and in a group)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from companion.chat import group_texts as gt
from companion.chat import texts
from companion.core.hints import HINT_EVERY, HintGate, hint_due
from tests.groupkit import BOT, group_bot

T0 = datetime(2025, 12, 1, 8, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(("last", "now", "due"), [
    (None, T0, True),  # never hinted
    (T0, T0, False),  # the same moment
    (T0, T0 + 29 * S, False),
    (T0, T0 + HINT_EVERY, True),
    (T0, T0 + 10 * HINT_EVERY, True),
    (T0, T0 - 5 * S, True),  # the clock went back: never held back by it
])
def test_hint_due(last: datetime | None, now: datetime, due: bool) -> None:
    assert hint_due(last, now) is due


def test_gate_per_key_and_bounded() -> None:
    gate = HintGate(size=2)
    assert [gate.allow(1, T0 + k * 0.02 * S) for k in range(50)].count(True) == 1  # 50 a second: one hint
    assert gate.allow(2, T0) and not gate.allow(2, T0 + S)  # keys are apart
    assert gate.allow(1, T0 + HINT_EVERY)
    assert gate.allow(3, T0 + S)  # a third key pushes out the least recently hinted (2)
    assert gate.allow(2, T0 + 2 * S)


async def test_fifty_messages_get_one_hint(tmp_path: Path) -> None:
    user, group = 3001, -1003001
    async with group_bot(tmp_path) as g:
        for k in range(50):
            g.tg.push_text(user, f"在吗{k}")
        await g.deliver()
        assert [m["text"] for m in g.tg.sent_messages(user)] == [texts.NOT_STARTED]
        for k in range(50):
            g.tg.push_group_text(user, group, f"@{BOT} 在吗{k}")
        await g.deliver()
        assert [m["text"] for m in g.tg.sent_messages(group)] == [gt.GROUP_NOT_STARTED.format(bot=BOT)]
