"""Proof 2, crashes: ``kill -9`` at a random moment while the bot writes extracted memories, or while
``bot.py decay``, ``bot.py backup`` or ``bot.py restore`` runs; the next process (the bot, or the next
command) starts on what the kill left. Every cycle checks that
the database opens and passes ``integrity_check``, that every memory committed before the kill is
still there, that no backup folder is left looking complete while it is not, and that no restore is
left half-done (the database file missing, or a staging file left behind)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

from companion.ops.backup.restore import before_restore_copies
from companion.ops.backup.staging import staging_path
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.llm import is_json_mode
from tests.stress.harness import (
    BotProcess,
    TaggedModel,
    bot_env,
    db_path,
    half_written_backups,
    integrity,
    memory_tables,
    record,
    scale,
    started,
    user_line,
)

FIRST_USER = 400_001
MODES = ("extraction", "decay", "backup", "restore")


def committed(db: Path) -> set[tuple[str, str]]:
    if not db.exists():
        return set()
    return {(key, event) for key, events in memory_tables(db).items() for event in events}


def half_done_restore(db: Path) -> list[str]:
    problems = []
    if not db.exists():
        problems.append("the database file is missing (moved aside, new one never renamed in)")
    return problems


def staging_left(db: Path) -> list[str]:
    """A restore killed while building leaves its staging file; the next holder of the lock removes it."""
    staging = staging_path(db)
    return [f"staging file {staging.name} left behind after the next start"] if staging.exists() else []


async def _cli_killed(env: dict[str, str], root: Path, rng: random.Random, durations: dict[str, float],
                      mode: str, *args: str) -> tuple[float, set[tuple[str, str]]]:
    """Run ``bot.py args``; the first run of a mode completes and is timed, later ones are killed at a
    random moment in the second half of that time (the first half is mostly imports)."""
    before = committed(db_path(root))
    cli = await BotProcess(env, root, *args).start()
    if mode not in durations:
        begin = asyncio.get_running_loop().time()
        code = await cli.wait()
        durations[mode] = asyncio.get_running_loop().time() - begin
        assert code == 0, cli.output[-2000:]
        return -1.0, before
    at = rng.uniform(0.4, 1.0) * durations[mode]
    try:
        await asyncio.wait_for(cli.proc.wait(), at)  # type: ignore[union-attr]
    except TimeoutError:
        await cli.kill()
    return at, before


async def _good_backup(env: dict[str, str], root: Path) -> Path:
    """A complete backup kept aside (backups of one day share a folder, which later cycles may kill)."""
    good = root / "good-backup"
    if not good.exists():
        cli = await BotProcess(env, root, "backup").start()
        assert await cli.wait() == 0, cli.output[-2000:]
        latest = max(p for p in (root / "backups").glob("*") if p.is_dir())
        shutil.copytree(latest, good)
    return good


async def test_kill_minus_nine_at_random_moments(tmp_path: Path) -> None:
    cycles = scale(1, int(os.environ.get("STRESS_CYCLES", "50")))
    rng = random.Random(2026)
    problems: list[str] = []
    kills: dict[str, int] = dict.fromkeys(MODES, 0)
    durations: dict[str, float] = {}
    model = TaggedModel(delay=(0.0, 0.05))
    db = db_path(tmp_path)
    restored: set[tuple[str, str]] = set()
    checked = 0  # committed memories verified after a kill, summed over the cycles
    async with FakeTelegram() as tg, FakeLLM() as llm:
        model.install(llm)
        env = bot_env(tg, llm, tmp_path, EXTRACT_EVERY_MIN="1", EXTRACT_EVERY_MAX="1")
        for cycle in range(cycles):
            mode = MODES[cycle % len(MODES)] if cycles >= len(MODES) else ("extraction", "backup")[cycle % 2]
            if mode == "extraction":
                # The bot restarts on what the last kill left; it must open it and poll.
                bot = await BotProcess(env, tmp_path, tg=tg).start()
                try:
                    await started(tg, bot)
                except AssertionError as exc:
                    problems.append(f"cycle {cycle}: restart failed: {exc}; {bot.output[-500:]}")
                    await bot.kill()
                    break
                users = [FIRST_USER + (cycle * 7 + k) % 40 for k in range(8)]
                extractions = len(llm.json_requests())
                sends = sum(1 for name, _ in tg.calls if name.lower() == "sendmessage")
                for uid in users:
                    tg.push_text(uid, "/start_aiGF")
                # The talk waits for the start answers: updates of one batch are handled concurrently.
                await tg.wait_for_call("sendMessage", 60, count=sends + len(users))
                for uid in users:
                    tg.push_text(uid, user_line(uid, cycle))
                # Kill while extraction answers are being written: after the first one, at a random moment.
                await llm.wait_for_requests(extractions + 1, is_json_mode, timeout=60)
                await asyncio.sleep(rng.uniform(0.0, 0.4))
                before = committed(db)
                await bot.kill()
                kills[mode] += 1
            elif mode == "restore":
                good = await _good_backup(env, tmp_path)
                at, before = await _cli_killed(env, tmp_path, rng, durations, mode, "restore", str(good), "--force")
                restored = committed(good / "memory.sqlite3")
                kills[mode] += at >= 0
            else:  # the command line opens the database the last kill left, like a restart
                at, before = await _cli_killed(env, tmp_path, rng, durations, mode, mode)
                kills[mode] += at >= 0
            after = committed(db)
            checked += len(before)
            # A restore replaces the database with the backup's content: either state is whole, a mix is not.
            lost = set() if mode == "restore" and after in (before, restored) else before - after
            check = integrity(db) if db.exists() else "missing"
            if check != "ok":
                problems.append(f"cycle {cycle} ({mode}): integrity_check {check}")
            if lost:
                problems.append(f"cycle {cycle} ({mode}): {len(lost)} committed memories lost, e.g. {sorted(lost)[:2]}")
            problems += [f"cycle {cycle} ({mode}): {p}" for p in half_written_backups(tmp_path / "backups")]
            if mode == "restore":
                problems += [f"cycle {cycle} (restore): {p}" for p in half_done_restore(db)]
        # The last restart: the database opens and the bot polls.
        final = await BotProcess(env, tmp_path, tg=tg).start()
        try:
            await started(tg, final)
        finally:
            await final.stop()
        problems += staging_left(db)
    figures = {
        "cycles": cycles, "kills_by_mode": kills, "memories_at_end": len(committed(db)),
        "committed_memories_checked_after_kills": checked,
        "integrity_check_at_end": integrity(db), "problems": sorted(set(problems)),
        # restore --force keeps the replaced database; only the newest RESTORE_KEEP_COPIES (3) stay.
        "before_restore_copies_at_end": len(before_restore_copies(db)),
    }
    record("crash", figures)
    assert not problems, "\n".join(problems)
    assert len(before_restore_copies(db)) <= 3, "old before-restore copies were not pruned"
    assert checked > 0 or cycles < len(MODES), "no memory was ever committed: the checks proved nothing"
