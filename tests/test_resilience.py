"""A locked database, failing jobs and the console: the companion degrades, never crashes or loses data."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import companion.storage.sqlite.connection as connection_module
from companion.chat import texts
from companion.core.models import MemoryDraft, Scope, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.jobs import scheduled as jobs
from tests.fakes import FakeLLM
from tests.scripted import is_extraction, user_words
from tests.support import Rig, close_rig, make_settings, open_rig

ME = Scope(31)
ROOT = Path(__file__).resolve().parent.parent


async def test_locked_database_during_a_turn(
    fake_llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connection_module, "BUSY_TIMEOUT_MS", 100)
    opened = await open_rig(fake_llm, make_settings(tmp_path))
    try:
        await opened.engine.remember(ME, [MemoryDraft("2025-12-20 感冒了", ["感冒"], 80, Validity.DAYS_30)],
                                     opened.clock())
        await opened.chat.start(ME)
        before = [(m.id, m.event, m.importance) for m in await opened.engine.memories(ME)]
        # Waits for a write of the store in flight (spare tables made in the background after the first
        # scope) to end, then holds the lock through the turn.
        blocker = sqlite3.connect(opened.settings.db_path, timeout=5)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            reply = await opened.chat.reply(ME, "感冒好像又严重了")
        finally:
            blocker.rollback()
            blocker.close()
        assert reply.ok, "the companion must still answer while the database is locked"
        assert [(m.id, m.event, m.importance) for m in await opened.engine.memories(ME)] == before
        assert (await opened.chat.reply(ME, "现在好了吗")).ok
        # The turn the locked database could not take waited in the session and is queued, in order, with
        # the next one: nothing lost, nothing twice.
        assert await opened.engine.pending_count(ME) == 2
        assert [t.user for t in await opened.engine.pending_turns(ME, 10)] == ["感冒好像又严重了", "现在好了吗"]
    finally:
        await close_rig(opened)


async def test_failing_job_is_logged_and_contained(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise RuntimeError("disk on fire")

    with caplog.at_level(logging.ERROR):
        await jobs.guarded("backup", broken)
    assert "job backup failed" in caplog.text and "disk on fire" in caplog.text


async def test_missed_decay_is_caught_up_at_startup(rig: Rig) -> None:
    three_days_ago = rig.clock() - timedelta(days=3)
    await rig.engine.remember(ME, [MemoryDraft("2025-12-20 感冒了", ["感冒"], 80, Validity.DAYS_30,
                                               created_at=three_days_ago)], three_days_ago)
    assert await jobs.decay_is_overdue(rig.engine, rig.clock())
    await jobs.run_decay(rig.engine, rig.clock())
    (memory,) = await rig.engine.memories(ME)
    assert memory.importance == pytest.approx(80 * 0.95**3)
    assert not await jobs.decay_is_overdue(rig.engine, rig.clock())
    await jobs.run_decay(rig.engine, rig.clock() + timedelta(hours=5))
    (again,) = await rig.engine.memories(ME)
    assert again.importance == memory.importance, "a second run on the same day changes nothing"


async def test_decay_job_extracts_queued_turns_first(rig: Rig) -> None:
    rig.llm.set_json_reply('{"memories": [{"event": "2025-12-23 搬家到上海", "keywords": ["搬家", "上海"], '
                           '"importance": 75, "validity": "30d", "type": "event"}]}')
    from companion.core.models import Turn

    await rig.engine.note_turn(ME, Turn("我下周搬家到上海", "好的", rig.clock()))
    await jobs.run_decay(rig.engine, rig.clock())
    assert [m.event for m in await rig.engine.memories(ME)] == ["搬家到上海"]
    assert await rig.engine.pending_count(ME) == 0


def test_scheduler_uses_configured_local_times(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, decay_time="04:10", backup_time="05:20", timezone="Asia/Shanghai")
    scheduler = jobs.build_scheduler(None, None, settings)  # type: ignore[arg-type]
    triggers = {job.id: str(job.trigger) for job in scheduler.get_jobs()}
    assert "hour='4', minute='10'" in triggers["decay"]
    assert "hour='5', minute='20'" in triggers["backup"]


async def test_console_mode_runs_the_same_pipeline(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.set_chat_reply("控制台里也能聊")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "LLM_"))}
    env.update(LLM_API_KEY="sk-console", LLM_BASE_URL=fake_llm.base_url, LLM_MAX_RETRIES="0",
               DATA_DIR=str(tmp_path / "data"), CONSOLE_USER_ID="9")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate("你好\n/quit\n".encode()), 60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert texts.GREETING_NEW in text and "控制台里也能聊" in text
    assert [user_words(r["messages"][-1]["content"]) for r in fake_llm.chat_requests()] == ["你好"]
    # The turn was queued for learning as a Telegram turn is, and extracted when the input ended.
    assert [FakeLLM.request_text(r).count("你好") for r in fake_llm.json_requests() if is_extraction(r)] == [1]
    db = sqlite3.connect(tmp_path / "data" / "memory.sqlite3")
    try:
        assert db.execute("SELECT count(*) FROM pending_turns WHERE scope_key = 'u9'").fetchone()[0] == 0
    finally:
        db.close()


SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize(
    ("newest", "now_local", "overdue"),
    [
        (None, "2025-12-24 10:00", True),  # never backed up
        ("2025-12-24", "2025-12-24 10:00", False),  # tonight's ran
        ("2025-12-23", "2025-12-24 10:00", True),  # down at 03:30 today
        ("2025-12-23", "2025-12-24 03:29", False),  # today's is not due yet
        ("2025-12-23", "2025-12-24 03:30", True),  # due this minute
        ("2025-12-22", "2025-12-24 03:00", True),  # down all of yesterday night
        ("2025-12-25", "2025-12-24 10:00", False),  # a folder from the future (clock moved) is not "missed"
    ],
)
def test_backup_is_overdue_table(newest: str | None, now_local: str, overdue: bool) -> None:
    now = datetime.fromisoformat(now_local).replace(tzinfo=SHANGHAI).astimezone(UTC)
    day = date.fromisoformat(newest) if newest else None
    assert jobs.backup_is_overdue(day, now, SHANGHAI, time(3, 30)) is overdue


async def test_missed_backup_is_caught_up_at_startup(rig: Rig) -> None:
    backups = rig.settings.backup_dir
    await rig.engine.remember(ME, [MemoryDraft("对花生过敏", ["花生", "过敏"], 90, Validity.PERMANENT)], rig.clock())
    (backups / "2020-01-01").mkdir(parents=True)
    (backups / "2020-01-01" / "memory.sqlite3").write_bytes(b"")
    (backups / "not-a-day").mkdir()
    assert jobs.newest_backup_day(backups) == date(2020, 1, 1)
    await jobs.catch_up(rig.engine, MaintenancePort(rig.store), rig.settings)
    newest = jobs.newest_backup_day(backups)
    assert newest is not None and newest > date(2020, 1, 1)
    assert (backups / newest.isoformat() / f"u{ME.user_id}.csv").exists()
    before = sorted(p.name for p in backups.iterdir())
    await jobs.catch_up(rig.engine, MaintenancePort(rig.store), rig.settings)
    assert sorted(p.name for p in backups.iterdir()) == before, "a second start the same day backs up nothing"
