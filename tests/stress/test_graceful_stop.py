"""Proof 7, graceful stop: SIGTERM while a reply is being generated, while an extraction is running, and
while ``bot.py backup`` writes. The work finishes or is safely abandoned, queued turns are still in the
database for the next start, and the process exits within 10 s."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.botdriver import CountingTelegram
from companion.core.models import MemoryDraft, Scope
from companion.core.timeutil import utcnow
from companion.ops.backup.nightly import IN_PROGRESS
from companion.storage.sqlite import SQLiteStore
from tests.fakes import FakeLLM
from tests.fakes.llm import is_json_mode
from tests.stress.harness import (
    FULL,
    TAG,
    BotProcess,
    TaggedModel,
    bot_env,
    db_path,
    half_written_backups,
    integrity,
    memory_tables,
    queued_texts,
    record,
    started,
    user_line,
)

pytestmark = pytest.mark.skipif(not FULL, reason="long proof: make stress")
USER = 700_001
LIMIT_S = 10.0
BACKUP_USERS = 1500


async def seed_users(db: Path, users: int) -> None:
    """Users with one memory each, written while no bot runs, so a backup has that many files to write."""
    store = await SQLiteStore.open(db)
    try:
        for uid in range(1, users + 1):
            await store.apply_changes(Scope(uid), utcnow(), [MemoryDraft(f"用户{uid}喜欢散步", ["散步"], 60.0)])
    finally:
        await store.close()


def stored_tags(db: Path) -> set[str]:
    return {f"{u}-{n}" for events in memory_tables(db).values() for e in events for u, n in TAG.findall(e)}


async def test_sigterm_during_reply_and_extraction(tmp_path: Path) -> None:
    figures: dict[str, object] = {}
    model = TaggedModel(delay=(3.0, 3.0))
    async with CountingTelegram() as tg, FakeLLM() as llm:
        model.install(llm)
        env = bot_env(tg, llm, tmp_path, LLM_TIMEOUT_SECONDS="30", EXTRACT_EVERY_MIN="2", EXTRACT_EVERY_MAX="2")
        # During a reply: the model takes 3 s; SIGTERM arrives 1 s into it.
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        tg.push_text(USER, "/start_aiGF")
        assert await tg.wait_count(USER, 1, 30)
        tg.push_text(USER, user_line(USER, 0))
        await llm.wait_for_requests(1, lambda b: not is_json_mode(b), timeout=30)
        await asyncio.sleep(1.0)
        code, seconds = await bot.stop(within=30)
        replied = len(tg.answers[USER]) - 1
        queued = queued_texts(db_path(tmp_path))
        figures["during_reply"] = {"exit_code": code, "exit_s": round(seconds, 1), "reply_sent": replied == 1,
                                   "turn_queued_for_memory": any(f"{USER}-0" in t for t in queued)}

        # During an extraction (every 2 turns). The countdown goes on across the restart (it is kept with each
        # turn), so turn 1 completes the one turn 0 began and is extracted at once; turn 3 triggers the next,
        # and SIGTERM comes 1 s into its 3 s call.
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        model.delay = (0.0, 0.0)
        tg.push_text(USER, user_line(USER, 1))
        assert await tg.wait_count(USER, replied + 2, 30)
        await llm.wait_for_requests(1, lambda b: is_json_mode(b) and f"{USER}-1" in str(b), timeout=30)
        tg.push_text(USER, user_line(USER, 2))
        assert await tg.wait_count(USER, replied + 3, 30)
        model.delay = (3.0, 3.0)
        tg.push_text(USER, user_line(USER, 3))
        await llm.wait_for_requests(1, lambda b: is_json_mode(b) and f"{USER}-3" in str(b), timeout=30)
        await asyncio.sleep(1.0)
        code, seconds = await bot.stop(within=30)
        db = db_path(tmp_path)
        said = {f"{USER}-{n}" for n in range(4)}
        waiting = {tag for tag in said if any(tag in t for t in queued_texts(db))}
        kept = stored_tags(db) | waiting
        figures["during_extraction"] = {"exit_code": code, "exit_s": round(seconds, 1),
                                        "turns_kept_or_stored": f"{len(kept & said)}/{len(said)}",
                                        "integrity_check": integrity(db)}

        # The next start extracts what was queued.
        model.delay = (0.0, 0.0)
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        tg.push_text(USER, user_line(USER, 4))
        tg.push_text(USER, user_line(USER, 5))
        await asyncio.sleep(4)
        code, seconds = await bot.stop(within=30)
        figures["next_start"] = {"stored": sorted(stored_tags(db)), "still_queued": len(queued_texts(db))}

        # During a reply the model would take 25 s over: the default STOP_TIMEOUT_SECONDS (8) abandons it,
        # sends nothing and keeps the user's text queued for memory.
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        answers = len(tg.answers[USER])
        model.delay = (25.0, 25.0)
        tg.push_text(USER, user_line(USER, 6))
        await llm.wait_for_requests(1, lambda b: not is_json_mode(b) and f"{USER}-6" in str(b), timeout=30)
        await asyncio.sleep(1.0)
        code, seconds = await bot.stop(within=40)
        figures["during_slow_reply"] = {
            "exit_code": code, "exit_s": round(seconds, 1), "reply_sent": len(tg.answers[USER]) > answers,
            "turn_queued_for_memory": any(f"{USER}-6" in t for t in queued_texts(db)),
        }
        model.delay = (0.0, 0.0)

        # During a backup run from the command line: enough users that the export takes a while, and the
        # signal sent once this run has put its in-progress marker down (earlier runs' files do not count).
        await seed_users(db, BACKUP_USERS)
        backup = await BotProcess(env, tmp_path, "backup").start()
        landed = "before the backup began"
        for _ in range(6000):
            if list((tmp_path / "backups").glob(f"*/{IN_PROGRESS}")):
                landed = "inside the backup"
                break
            await asyncio.sleep(0.005)
        code, seconds = await backup.stop(within=30)
        day = max(p for p in (tmp_path / "backups").iterdir() if p.is_dir())
        figures["during_backup"] = {
            "exit_code": code, "exit_s": round(seconds, 1), "signal_landed": landed,
            "csv_files_of_users": f"{len(list(day.glob('*.csv')))}/{BACKUP_USERS + 1}",
            "left_marked_unfinished": (day / IN_PROGRESS).exists(),
            "half_written": half_written_backups(tmp_path / "backups"),
        }
    record("graceful_stop", figures)
    problems = [name for name, part in figures.items() if isinstance(part, dict) and part.get("exit_s", 0) > LIMIT_S]
    reply = figures["during_reply"]
    assert isinstance(reply, dict)
    assert not problems, figures
    assert reply["reply_sent"] or reply["turn_queued_for_memory"], figures
    assert figures["during_extraction"]["turns_kept_or_stored"] == "4/4", figures  # type: ignore[index]
    assert figures["during_slow_reply"]["turn_queued_for_memory"], figures  # type: ignore[index]
    assert not figures["during_backup"]["half_written"], figures  # type: ignore[index]
