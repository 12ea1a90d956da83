"""Forgetting is one transaction: the tombstone, the profile, the queued turns and the short-term items go
together or not at all. A failure injected at any statement (a SQLite trigger) leaves everything as it
was, and a process killed in the middle of a forget never restarts with the fact in its profile."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from companion.core.errors import StorageError
from companion.core.models import MemoryDraft, MemoryType, Profile, Scope, ShortKind, Status, Tier, Turn, Validity
from companion.storage.sqlite import SQLiteStore
from tests.support import Rig, make_settings

ROOT = Path(__file__).resolve().parent.parent

SCOPE = Scope(1001)
FACT = "用户确诊乙肝小三阳"
TOLD = "医生说我是小三阳，要定期复查"
CRASH_EXIT = 9


async def seed(store: SQLiteStore, now: datetime) -> int:
    """A memory saved from a turn that is still queued and in the short-term context, quoted by the profile."""
    draft = MemoryDraft(event=FACT, keywords=["乙肝"], importance=90.0, type=MemoryType.FACT, tier=Tier.LONG,
                        validity=Validity.PERMANENT)
    [handle] = await store.apply_changes(SCOPE, now, inserts=[draft], sources=["k1"])
    await store.add_turn(SCOPE, Turn(user=TOLD, reply="别担心", at=now, key="k1"))
    await store.add_short(SCOPE, ShortKind.TURN, TOLD, "别担心", now, keep=200, keys=("k1",))
    await store.save_profile(SCOPE, Profile(core=FACT), now)
    return handle


async def state(store: SQLiteStore, handle: int) -> tuple[Status, str, str | None, list[str], list[str]]:
    [memory] = await store.fetch_by_ids(SCOPE, [handle])
    profile = await store.load_profile(SCOPE)
    return (memory.status, memory.event, profile[0].core if profile else None,
            [t.user for t in await store.pending_turns(SCOPE, 10)],
            [i.user for i in await store.short_items(SCOPE, ShortKind.TURN, 10)])


UNTOUCHED = (Status.ACTIVE, FACT, FACT, [TOLD], [TOLD])


@pytest.mark.parametrize(("table", "operation"), [
    ("profiles", "DELETE"), ("pending_turns", "DELETE"), ("short_term", "DELETE"), ("memory", "UPDATE"),
])
async def test_a_failure_at_any_statement_leaves_nothing_half_forgotten(rig: Rig, table: str, operation: str) -> None:
    handle = await seed(rig.store, rig.clock())
    target = f'"{rig.store.memory_table(SCOPE)}"' if table == "memory" else table  # "memory": the tombstone
    with sqlite3.connect(rig.settings.db_path) as conn:
        conn.execute(f"CREATE TRIGGER boom BEFORE {operation} ON {target} BEGIN SELECT RAISE(ABORT, 'disk gone'); END")
    with pytest.raises(StorageError):
        await rig.engine.forget(SCOPE, [handle])
    with sqlite3.connect(rig.settings.db_path) as conn:
        conn.execute("DROP TRIGGER boom")
    assert await state(rig.store, handle) == UNTOUCHED
    # Once the failure is gone the forget goes through, everywhere.
    assert await rig.engine.forget(SCOPE, [handle]) == 1
    assert await state(rig.store, handle) == (Status.FORGOTTEN, "", None, [], [])


CRASHING_FORGET = """
import asyncio, os, sys
from pathlib import Path
from companion.core.models import Scope
from companion.recall.keywords import KeywordExtractor
from companion.storage.sqlite import SQLiteStore
from companion.ops.engine_assembly import engine_on
from tests.support import make_settings

async def main() -> None:
    settings = make_settings(Path(sys.argv[1]))
    store = await SQLiteStore.open(settings.db_path)
    # Killed in the middle of the forget: when the profile is withdrawn, the process dies on the spot.
    await store._conn.create_function("crash", 0, lambda: os._exit({code}))
    engine = await engine_on(store, settings, KeywordExtractor())
    await engine.forget(Scope({user}), [int(sys.argv[2])])
    print("forget finished without the crash")

asyncio.run(main())
"""


async def test_a_process_killed_mid_forget_never_keeps_the_fact_in_its_profile(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    settings.data_dir.mkdir(parents=True)
    store = await SQLiteStore.open(settings.db_path)
    handle = await seed(store, datetime(2025, 12, 23, 2, 0, tzinfo=UTC))
    await store.close()
    with sqlite3.connect(settings.db_path) as conn:
        conn.execute("CREATE TRIGGER crash_here BEFORE DELETE ON profiles BEGIN SELECT crash(); END")

    script = CRASHING_FORGET.format(code=CRASH_EXIT, user=SCOPE.user_id)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(tmp_path), str(handle), cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    output, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == CRASH_EXIT, output.decode(errors="replace")

    with sqlite3.connect(settings.db_path) as conn:
        conn.execute("DROP TRIGGER crash_here")
    store = await SQLiteStore.open(settings.db_path)
    try:
        after = await state(store, handle)
    finally:
        await store.close()
    # All or nothing: the user got no confirmation and everything is as it was; never a tombstone beside
    # a profile (or a queued turn) that still tells the fact.
    assert after == UNTOUCHED


async def test_forgotten_text_leaves_the_files_on_disk(tmp_path: Path) -> None:
    """Found by the adversarial run: forgotten text stayed in the SQLite file's free space and in its
    write-ahead log until a clean stop. Now it is in neither the database file nor the log once forget
    returns, with the store still open."""
    path = tmp_path / "m.sqlite3"
    # No spare tables made in the background: a writer's transaction open at that moment would keep the
    # checkpoint from finishing, and the pages would leave at the next one (docs/memory.md, "On disk").
    store = await SQLiteStore.open(path, spare_tables=0)
    try:
        now = datetime(2026, 12, 5, tzinfo=UTC)
        handle = await seed(store, now)
        files = [path, path.with_name(path.name + "-wal")]
        assert any(FACT.encode() in f.read_bytes() for f in files if f.exists())  # the probe sees it before
        await store.forget_everywhere(SCOPE, [handle], now)
        for told in (FACT, TOLD):
            found = [f.name for f in files if f.exists() and told.encode() in f.read_bytes()]
            assert not found, f"{told} still in {found}"
    finally:
        await store.close()
