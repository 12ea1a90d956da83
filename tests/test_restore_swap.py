"""Restore's swap is crash-safe and old kept copies are pruned.

A crash is simulated at every file-system step of the swap (each link, rename, unlink and fsync raises
in turn): whatever step it hits, a whole database is at the live path (the old one or the new one,
never a mix, never none) and the old one is not lost."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from companion.core.models import Memory, MemoryType, Origin, Scope, Validity
from companion.ops.backup.restore import before_restore_copies, prune_before_restore, restore
from companion.ops.backup.staging import staging_path
from companion.storage.sqlite import SQLiteStore
from tests.fakes import FakeLLM, FakeTelegram
from tests.stress.harness import BotProcess, bot_env, db_path, integrity, memory_tables, started

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
OLD = Scope(11)
NEW = Scope(22)


class Crash(BaseException):
    """Stands for kill -9: nothing after it runs (restore's cleanup catches Exception-s only in the swap)."""


def memory(mid: int, event: str) -> Memory:
    return Memory(id=mid, event=event, keywords=["散步"], importance=60.0, created_at=NOW - timedelta(days=1),
                  validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=NOW, expires_at=None,
                  type=MemoryType.EVENT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=NOW)


async def write(path: Path, scope: Scope, events: list[str], *, leave_wal: bool = False) -> None:
    """A database holding ``events``; ``leave_wal`` leaves the last commits in its -wal as a killed bot does."""
    store = await SQLiteStore.open(path)
    await store.import_rows(scope, [memory(i + 1, e) for i, e in enumerate(events[:-1])], NOW)
    if leave_wal:
        saved = path.with_name("crashed")
        saved.mkdir()
        await store.import_rows(scope, [memory(len(events), events[-1])], NOW)
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(f"{path}{suffix}", saved / f"db{suffix}")
        await store.close()
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(saved / f"db{suffix}", f"{path}{suffix}")
        assert Path(f"{path}-wal").stat().st_size > 0
        return
    await store.import_rows(scope, [memory(len(events), events[-1])], NOW)
    await store.close()


def content(path: Path) -> tuple[str, set[str]]:
    """integrity_check and every memory event, read like the next start would (side files included)."""
    return integrity(path), {e for events in memory_tables(path).values() for e in events}


OLD_EVENTS = ["旧的一", "旧的二", "旧的三（只在WAL里）"]
NEW_EVENTS = ["新的一", "新的二"]


async def prepare(root: Path) -> tuple[Path, Path]:
    live = root / "data" / "memory.sqlite3"
    live.parent.mkdir(parents=True)
    await write(live, OLD, OLD_EVENTS, leave_wal=True)
    source = root / "snapshot.sqlite3"
    await write(source, NEW, NEW_EVENTS)
    return live, source


STEPS = ("link", "replace", "unlink", "fsync")


def crash_at(monkeypatch: pytest.MonkeyPatch, n: int) -> list[str]:
    """Make the ``n``-th file-system step of the swap raise Crash; returns the steps taken so far."""
    taken: list[str] = []
    originals: dict[str, Any] = {"link": os.link, "replace": os.replace, "fsync": os.fsync, "unlink": Path.unlink}

    def step(name: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            taken.append(name)
            if len(taken) == n:
                raise Crash(f"killed at step {n} ({name})")
            return originals[name](*args, **kwargs)
        return run

    monkeypatch.setattr(os, "link", step("link"))
    monkeypatch.setattr(os, "replace", step("replace"))
    monkeypatch.setattr(os, "fsync", step("fsync"))
    monkeypatch.setattr(Path, "unlink", step("unlink"))
    return taken


async def test_a_crash_at_any_step_of_the_swap_leaves_a_whole_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashes = 0
    for n in range(1, 100):
        root = tmp_path / f"crash-{n}"
        live, source = await prepare(root)
        with monkeypatch.context() as patch:
            taken = crash_at(patch, n)
            try:
                await restore(source, live, NOW, force=True)
            except Crash:
                crashes += 1
            else:
                break
            finally:
                patch.undo()
        assert live.exists(), f"no database after a crash at step {n} ({taken[-1]})"
        status, events = content(live)
        assert status == "ok", (n, taken)
        assert events in (set(OLD_EVENTS), set(NEW_EVENTS)), (n, taken, events)
        if events == set(NEW_EVENTS):  # the old database is gone from the live path: it must be kept whole
            [kept] = before_restore_copies(live)
            assert content(kept) == ("ok", set(OLD_EVENTS)), (n, taken)
    assert crashes >= 8, "the swap has fewer steps than expected: is the crash simulated at all?"
    status, events = content(live)
    assert (status, events) == ("ok", set(NEW_EVENTS))
    [kept] = before_restore_copies(live)
    assert content(kept) == ("ok", set(OLD_EVENTS))


async def test_the_kept_copy_holds_the_commits_that_were_only_in_the_wal(tmp_path: Path) -> None:
    live, source = await prepare(tmp_path)
    result = await restore(source, live, NOW, force=True)
    assert result.kept_old is not None
    assert content(result.kept_old) == ("ok", set(OLD_EVENTS))
    assert content(live) == ("ok", set(NEW_EVENTS))
    # The live database's old side files went with the old file; none is left to be replayed onto the new one.
    assert not Path(f"{live}-wal").exists() or Path(f"{live}-wal").stat().st_size == 0


async def test_two_restores_in_one_second_keep_both_old_databases(tmp_path: Path) -> None:
    live, source = await prepare(tmp_path)
    first = await restore(source, live, NOW, force=True)
    second = await restore(source, live, NOW, force=True)
    assert first.kept_old != second.kept_old
    assert first.kept_old is not None and second.kept_old is not None
    assert content(first.kept_old)[1] == set(OLD_EVENTS)
    assert content(second.kept_old)[1] == set(NEW_EVENTS)


async def test_only_the_newest_copies_are_kept(tmp_path: Path) -> None:
    live, source = await prepare(tmp_path)
    results = [await restore(source, live, NOW + timedelta(minutes=i), force=True, keep=3) for i in range(5)]
    kept = before_restore_copies(live)
    assert kept == [r.kept_old for r in results[2:]]
    assert results[3].pruned == (results[0].kept_old,)
    assert results[4].pruned == (results[1].kept_old,)
    leftovers = [p.name for p in live.parent.iterdir() if "before-restore" in p.name and
                 not any(p.name.startswith(k.name) for k in kept)]
    assert leftovers == [], "a pruned copy's -wal/-shm was left behind"


@pytest.mark.parametrize(
    ("names", "keep", "left"),
    [
        ([], 3, []),
        (["20260101T000000"], 0, []),
        (["20260101T000000", "20260102T000000"], 3, ["20260101T000000", "20260102T000000"]),
        (["20260103T000000", "20260101T000000", "20260102T000000"], 1, ["20260103T000000"]),
        (["20260101T000000", "20260101T000000-2", "20260101T000001"], 2, ["20260101T000000-2", "20260101T000001"]),
    ],
)
def test_prune_before_restore(tmp_path: Path, names: list[str], keep: int, left: list[str]) -> None:
    db = tmp_path / "memory.sqlite3"
    for name in names:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}.before-restore-{name}{suffix}").write_bytes(b"x")
    db.write_bytes(b"live")
    prune_before_restore(db, keep)
    assert [p.name.removeprefix("memory.sqlite3.before-restore-") for p in before_restore_copies(db)] == left
    assert len(list(tmp_path.iterdir())) == 1 + 3 * len(left)


async def test_a_killed_restores_staging_file_is_removed_by_the_next_restore(tmp_path: Path) -> None:
    live, source = await prepare(tmp_path)
    staging = staging_path(live)
    for suffix in ("", "-wal", "-journal"):
        Path(f"{staging}{suffix}").write_bytes(b"half-built")
    result = await restore(source, live, NOW, force=True)
    assert result.rows == len(NEW_EVENTS)
    assert sorted(p.name for p in live.parent.iterdir() if p.name.startswith(".")) == []


async def test_the_bot_removes_a_killed_restores_staging_file_at_start(tmp_path: Path) -> None:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        env = bot_env(tg, llm, tmp_path)
        staging = staging_path(db_path(tmp_path))
        staging.parent.mkdir(parents=True)
        staging.write_bytes(b"half-built")
        Path(f"{staging}-wal").write_bytes(b"half-built")
        bot = await BotProcess(env, tmp_path, tg=tg).start()
        await started(tg, bot)
        code, _ = await bot.stop()
    assert code == 0
    assert not staging.exists() and not Path(f"{staging}-wal").exists()
    assert "removed the half-built database of a restore that was killed" in bot.output
