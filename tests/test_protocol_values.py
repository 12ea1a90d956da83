"""The enums that name stored and sent values keep exactly the strings stored and sent before them: the
status reasons in the database and the CSV, the on/off settings, and the buttons' callback data."""

from __future__ import annotations

import sqlite3

import pytest

from companion.chat.group import GroupSettings
from companion.core.models import MemoryDraft, Scope, StatusReason, Switch
from companion.core.setting import WEEKLY
from companion.core.timeutil import utcnow
from companion.ops.jobs.proactive import set_weekly
from handlers.groups import Confirm, ForgetGroupCB
from handlers.keyboards import (
    REVIEW_UNDO,
    ForgetAction,
    ForgetCB,
    MemoryAction,
    MemoryCB,
    ReviewCB,
    StartAction,
    StartCB,
)
from tests.support import Rig

ME = Scope(7001)


@pytest.mark.parametrize(("member", "stored"), [
    (StatusReason.NONE, ""), (StatusReason.USER, "user"), (StatusReason.PROMOTED, "promoted"),
    (StatusReason.REPLACED, "replaced"), (StatusReason.REWORDED, "reworded"), (StatusReason.UNDONE, "undone"),
    (StatusReason.EVICTED, "evicted"), (StatusReason.FADED, "faded"), (StatusReason.EXPIRED, "expired"),
    (StatusReason.DUPLICATE, "duplicate"), (Switch.ON, "on"), (Switch.OFF, "off"),
])
def test_a_member_is_its_stored_string(member: StatusReason | Switch, stored: str) -> None:
    assert member == stored and str(member) == stored and f"{member}" == stored
    assert type(member)(stored) is member  # what the database gives back reads as the member


@pytest.mark.parametrize(("data", "packed"), [
    (MemoryCB(action=MemoryAction.OK, handle=3), "m:ok:3:0"),
    (MemoryCB(action=MemoryAction.RESTORE, handle=3, page=2), "m:restore:3:2"),
    (ForgetCB(action=ForgetAction.ALL, count=4), "f:all:0:4"),
    (ForgetCB(action=ForgetAction.CANCEL), "f:cancel:0:0"),
    (ReviewCB(action=REVIEW_UNDO, handle=5, at=9), "r:undo:5:9::0:"),
    (StartCB(action=StartAction.ON), "s:on"),
    (ForgetGroupCB(action=Confirm.NO, by=8), "fg:no:8"),
])
def test_buttons_carry_the_same_data(data: MemoryCB | ForgetCB | ReviewCB | StartCB | ForgetGroupCB,
                                     packed: str) -> None:
    assert data.pack() == packed
    assert type(data).unpack(packed) == data


def test_an_unknown_action_still_parses_for_its_handler_to_ignore() -> None:
    assert MemoryCB.unpack("m:zzz:3:0").action == "zzz"


async def test_stored_values_are_the_plain_strings(rig: Rig) -> None:
    now = utcnow()
    ids = await rig.engine.remember(ME, [MemoryDraft("喜欢爬山", ["爬山"], 60.0)], now)
    await rig.engine.forget(ME, ids, reason=StatusReason.USER)
    await set_weekly(rig.engine, ME, True)
    await GroupSettings(rig.engine).set_memory(-100123, False)
    with sqlite3.connect(rig.settings.db_path) as conn:
        reasons = [r for (r,) in conn.execute(f'SELECT status_reason FROM "{ME.table}"')]
        rows = conn.execute("SELECT name, owner, value FROM settings")
        stored = {(name, owner): value for name, owner, value in rows}
    assert reasons == ["user"]
    assert stored[("group_memory", "-100123")] == "off" and stored[("weekly", ME.key)] == "on"
    assert await rig.engine.setting(WEEKLY, ME) is True
    assert not await GroupSettings(rig.engine).memory_on(-100123)
