"""Fuzzing recovery: the clock jumping backward and forward days between decay and backup runs, and
SIGTERM at any moment of ``python bot.py restore``. No memory is lost or doubled, decay never runs twice
over the same days, every backup written restores, and the database is always the old one or the new one.
The example count follows ``FUZZ_EXAMPLES`` (raised by ``make stress``)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.core.models import Memory, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.engine.maintenance_port import MaintenancePort
from companion.ops.backup.nightly import make_backup
from companion.ops.backup.restore import restore
from companion.storage.sqlite import SQLiteStore
from tests.process import ROOT, clean_env
from tests.test_backup_scopes import read_every

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
TZ = UTC
START = datetime(2026, 11, 25, 3, 30, tzinfo=UTC)
DAY = timedelta(days=1)
SCOPES = (Scope(1), Scope(2, -100123), Scope(3, -1001234567890))


def seed_memories(base: int) -> list[Memory]:
    """Decaying ones (short-lived, mentioned, near the cleanup floor) and ones that never decay."""
    shapes = [(Validity.DAYS_7, Tier.SHORT, 30.0, False, None), (Validity.DAYS_30, Tier.MEDIUM, 60.0, False, 2),
              (Validity.DAYS_30, Tier.MEDIUM, 12.0, False, None), (Validity.PERMANENT, Tier.LONG, 90.0, False, None),
              (Validity.DAYS_30, Tier.MEDIUM, 50.0, True, None)]
    out = []
    for i, (validity, tier, importance, pinned, mentioned_days) in enumerate(shapes):
        created = START - 3 * DAY
        lifetime = validity.lifetime()
        out.append(Memory(
            id=base + i, event=f"事件{base + i}", keywords=[f"词{i}"], importance=importance, created_at=created,
            validity=validity, last_mentioned_at=None if mentioned_days is None else START - mentioned_days * DAY,
            updated_at=created, expires_at=None if lifetime is None else created + lifetime, type=MemoryType.EVENT,
            origin=Origin.EXTRACTED, mention_count=1, last_decay_at=START - DAY, tier=tier, pinned=pinned,
        ))
    return out


async def seeded(path: Path) -> SQLiteStore:
    store = await SQLiteStore.open(path)
    for n, scope in enumerate(SCOPES):
        await store.import_rows(scope, seed_memories(10 * n + 1), START)
    return store


def ids_of(state: dict[Scope, list[Memory]]) -> list[int]:
    return sorted(m.id for ms in state.values() for m in ms)


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jumps=st.lists(st.integers(-6, 9), min_size=1, max_size=4), backup_at=st.sets(st.integers(0, 3)))
async def test_clock_jumps_across_decay_and_backups_lose_and_double_nothing(
    jumps: list[int], backup_at: set[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        jumpy, steady = await seeded(root / "jumpy.sqlite3"), await seeded(root / "steady.sqlite3")
        try:
            ids = ids_of(await read_every_open(jumpy))
            now, newest = START, None
            backed_up: dict[str, dict[Scope, list[Memory]]] = {}
            for step, jump in enumerate(jumps):
                now += jump * DAY
                before = await read_every_open(jumpy)
                await jumpy.decay_and_clean(list(SCOPES), now)
                if newest is None or now > newest:  # the same runs on a clock that never goes back
                    newest = now
                    await steady.decay_and_clean(list(SCOPES), now)
                after = await read_every_open(jumpy)
                assert ids_of(after) == ids  # nothing lost, nothing doubled: forgetting leaves a tombstone
                for scope, memories in after.items():
                    for old, new in zip(before[scope], memories, strict=True):
                        assert new.importance <= old.importance  # decay never gives importance back
                        if old.validity is Validity.PERMANENT or old.pinned or old.tier is Tier.LONG:
                            assert new == old
                assert after == await read_every_open(steady)  # a backward jump redoes and undoes nothing
                if step in backup_at:
                    result = await make_backup(MaintenancePort(jumpy), root / "backups", now, TZ, keep_days=60)
                    backed_up[result.folder.name] = after
        finally:
            await jumpy.close()
            await steady.close()
        # Every day written restores to what the database held when it was last written, from either form.
        assert sorted(p.name for p in (root / "backups").iterdir()) == sorted(backed_up) if backed_up else True
        for day, state in backed_up.items():
            for n, source in enumerate((root / "backups" / day, root / "backups" / day / "memory.sqlite3")):
                target = root / f"r{day}-{n}.sqlite3"
                await restore(source, target, now)
                got = await read_every(target)
                assert got == state


async def read_every_open(store: SQLiteStore) -> dict[Scope, list[Memory]]:
    return {scope: await store.fetch_memories(scope, frozenset(Status)) for scope in await store.scopes()}


# ---- SIGTERM during a restore -------------------------------------------------------------------------

OLD_USERS = 30
NEW_USERS = 1500


def events_of(db: Path) -> tuple[str, set[str]]:
    """integrity_check and every memory event, read as the next start would (side files included)."""
    conn = sqlite3.connect(db)
    try:
        status = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
        tables = [str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                                    "AND name LIKE 'mem\\_%' ESCAPE '\\'")]
        return status, {str(r[0]) for t in tables for r in conn.execute(f'SELECT event FROM "{t}"')}
    finally:
        conn.close()


async def build(path: Path, users: int, prefix: str) -> None:
    store = await SQLiteStore.open(path)
    try:
        for uid in range(1, users + 1):
            memory = replace(seed_memories(uid)[0], event=f"{prefix}{uid}")
            await store.import_rows(Scope(uid), [memory], START)
    finally:
        await store.close()


async def test_sigterm_at_any_moment_of_a_restore_leaves_the_old_or_the_new_database(tmp_path: Path) -> None:
    backup_source = tmp_path / "source.sqlite3"
    await build(backup_source, NEW_USERS, "新")
    store = await SQLiteStore.open(backup_source)
    try:
        day = (await make_backup(MaintenancePort(store), tmp_path / "backups", START, TZ, keep_days=30)).folder
    finally:
        await store.close()
    old_state = new_state = None
    codes: list[int] = []
    env = clean_env()
    # Kill moments from the process start to the end of a restore of 1,500 files; the last one finishes.
    for n, delay in enumerate((0.3, 1.0, 1.8, 2.6, 3.5, None)):
        data = tmp_path / f"data{n}"
        live = data / "memory.sqlite3"
        await build(live, OLD_USERS, "旧")
        old_state = events_of(live)
        env.update(DATA_DIR=str(data), BACKUP_DIR=str(tmp_path / "backups"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(ROOT / "bot.py"), "restore", str(day), "--force", env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        if delay is not None:
            await asyncio.sleep(delay)
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 120)
        # 130: stopped by the signal; -15: killed before the command had set its handler (nothing done yet).
        assert proc.returncode in (0, 130, -signal.SIGTERM), err.decode()
        codes.append(proc.returncode)
        assert "Traceback" not in err.decode()
        state = events_of(live)
        if proc.returncode == 0:
            new_state = state
            assert state == ("ok", {f"新{uid}" for uid in range(1, NEW_USERS + 1)})
        else:
            assert state in (old_state, ("ok", {f"新{uid}" for uid in range(1, NEW_USERS + 1)})), n
        assert not list(data.glob(".*.restoring*")), "a stopped restore left its half-built database"
    assert old_state is not None and old_state[0] == "ok" and new_state is not None
    assert 130 in codes, codes  # at least one stop landed inside the restore
