"""Proof 6, security: no input reaches a table name; another user's button or tool call changes nothing;
secrets and memory text stay out of logs above DEBUG and out of error messages; CSV cells are neutralised
against formula injection and restore undoes it exactly; a memory that tries to instruct the model stays
quoted reference data (proved in ``tests/test_prompt.py``)."""

from __future__ import annotations

import csv
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.core.errors import CompanionError, InvalidScopeError
from companion.core.models import MemoryDraft, Scope, Validity
from companion.core.timeutil import utcnow
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import make_backup
from companion.ops.backup.restore import restore
from companion.storage.sqlite import SQLiteStore
from tests.support import USER, Live, Rig

OTHER = 6363
TABLE = re.compile(r"mem_(u[1-9]\d*|c[np][1-9]\d*_u[1-9]\d*)")


@settings(max_examples=200, deadline=None)
@given(key=st.one_of(st.text(max_size=40), st.sampled_from([
    'u1"; DROP TABLE scopes; --', "u1 ", "u01", "u-1", "cn1_u2;", "u1\x00", "u１", "cp1_u1_u2", "u" + "9" * 30])))
def test_no_text_reaches_a_table_name(key: str) -> None:
    """Scope keys come back from the database and from backup file names: only the exact integer forms
    name a table, anything else is refused before SQL sees it."""
    try:
        scope = Scope.from_key(key)
    except (InvalidScopeError, ValueError):
        return
    assert TABLE.fullmatch(scope.table), scope.table
    assert scope.key == key


@pytest.mark.parametrize("bad", ["1; DROP TABLE x", 1.5, -3, 0, True, "12 OR 1=1", None])
def test_scope_ids_must_be_integers(bad: object) -> None:
    with pytest.raises((InvalidScopeError, TypeError, ValueError)):
        Scope(bad)  # type: ignore[arg-type]


async def test_another_users_handle_changes_nothing(rig: Rig) -> None:
    now = rig.clock()
    [handle] = await rig.engine.remember(Scope(OTHER), [MemoryDraft("别人的秘密", ["秘密"], 80.0,
                                                                    validity=Validity.PERMANENT)], now)
    before = await rig.engine.memories(Scope(OTHER))
    mine = Scope(USER)
    assert await rig.engine.forget(mine, [handle]) == 0
    for change in (rig.engine.archive, rig.engine.promote, rig.engine.keep):
        with pytest.raises(CompanionError):
            await change(mine, handle, now)
    with pytest.raises(CompanionError):
        await rig.engine.edit(mine, handle, "改掉别人的记忆", now)
    assert await rig.engine.memories(Scope(OTHER)) == before


async def test_another_users_buttons_change_nothing(live: Live) -> None:
    now = live.rig.clock()
    [handle] = await live.rig.engine.remember(Scope(OTHER), [MemoryDraft("别人的秘密", ["秘密"], 80.0,
                                                                          validity=Validity.PERMANENT)], now)
    before = await live.rig.engine.memories(Scope(OTHER))
    await live.say("/start_aiGF", 1)
    message = live.tg.sent_messages(USER)[0]
    for data in (f"m:forget:{handle}:0", f"m:archive:{handle}:0", f"m:promote:{handle}:0", f"f:one:{handle}:0",
                 f"r:forget:{handle}:0:::", f"r:archive:{handle}:0:::", f"m:edit:{handle}:0"):
        live.tg.push_callback(USER, int(message["message_id"]), data)
    await live.tg.wait_for_callback_answers(7)
    assert await live.rig.engine.memories(Scope(OTHER)) == before


SECRET_MEMORY = "我对青霉素过敏，银行卡密码是123456"


async def test_secrets_and_memory_text_stay_out_of_logs(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await live.rig.engine.remember(Scope(USER), [MemoryDraft(SECRET_MEMORY, ["青霉素", "过敏"], 90.0,
                                                             validity=Validity.PERMANENT)], live.rig.clock())
    await live.say("/start_aiGF", 1)
    live.llm.fail_next(1, 500)
    await live.say("我对青霉素过敏吗", 2)
    live.llm.fail_next(1, 401)
    await live.say("青霉素的事你还记得吗", 3)
    live.llm.raw_next("<html>bad gateway sk-test</html>")
    await live.say("过敏的事", 4)
    live.tg.fail_next("sendMessage", 1, 500)
    live.tg.push_text(USER, "还在吗")
    await live.tg.wait_for_call("sendMessage", count=5)
    await live.say("/memories", 5)
    await live.rig.chat.drain()
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG]
    assert loud, "nothing was logged: the check would prove nothing"
    for record in loud:
        text = record.getMessage()
        exc = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        for secret in (live.tg.token, "sk-test", SECRET_MEMORY, "青霉素"):
            assert secret not in text and secret not in exc, f"{secret!r} in {record.levelname} {record.name}: {text}"
    for sent in live.tg.sent_messages(USER):
        assert "sk-test" not in str(sent["text"]) and live.tg.token not in str(sent["text"])


FORMULAS = ["=HYPERLINK(\"http://evil\")", "+1+1", "-2+3", "@SUM(A1)", "\tcmd", "\rcmd", "'quoted", "=1", "普通"]


async def test_csv_cells_neutralised_and_restore_undoes_it(rig: Rig, tmp_path: Path) -> None:
    now = utcnow()
    scope = Scope(USER)
    drafts = [MemoryDraft(event, [f"词{i}"], 50.0 + i, validity=Validity.PERMANENT) for i, event in enumerate(FORMULAS)]
    await rig.engine.remember(scope, drafts, now)
    events = sorted(m.event for m in await rig.engine.memories(scope))
    store = await SQLiteStore.open(rig.settings.db_path)
    try:
        result = await make_backup(MaintenancePort(store), tmp_path / "backups", now, rig.settings.tz, 30)
    finally:
        await store.close()
    with (result.folder / f"u{USER}.csv").open(encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.reader(handle))
    cells = [row[1] for row in rows[1:]]
    dangerous = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
    assert not dangerous, dangerous
    target = tmp_path / "restored" / "memory.sqlite3"
    await restore(result.folder, target, now)
    restored = await SQLiteStore.open(target)
    try:
        assert sorted(m.event for m in await restored.fetch_memories(scope)) == events
    finally:
        await restored.close()


# A memory that tries to instruct the model stays quoted data: tests/test_prompt.py
# (test_a_memory_that_reads_like_an_instruction_stays_quoted_data) proves it on the real prompt.
