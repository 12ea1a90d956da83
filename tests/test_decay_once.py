"""The scheduled decay runs once per local day, whichever process leads when it fires: the lead can pass
to another worker after the night's decay ran, and the store's record of it is what they share."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from companion.ops.jobs.scheduled import run_decay_once
from memory import DecayReport
from tests.support import Rig

SHANGHAI = ZoneInfo("Asia/Shanghai")
NIGHT = datetime(2026, 1, 5, 19, 0, tzinfo=UTC)  # 03:00 on 6 January in Shanghai


async def test_a_second_scheduler_the_same_day_leaves_the_decay_alone(rig: Rig) -> None:
    assert isinstance(await run_decay_once(rig.engine, SHANGHAI, NIGHT), DecayReport)
    later = await run_decay_once(rig.engine, SHANGHAI, NIGHT + timedelta(hours=5))
    assert later == "already ran today at 03:00"
    assert await rig.engine.last_decay_at() == NIGHT
    # The next local day decays again.
    assert isinstance(await run_decay_once(rig.engine, SHANGHAI, NIGHT + timedelta(days=1)), DecayReport)
