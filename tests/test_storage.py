"""SQLiteStore against real SQLite files: WAL, migrations, scope isolation, exact text, the turn queue,
profiles, decay through SQL functions, and a locked database."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

import companion.storage.sqlite.connection as connection_module
from companion.core import rules
from companion.core.errors import DatabaseBusyError, InvalidScopeError, StorageError
from companion.core.models import (
    DynamicTrait,
    Memory,
    MemoryDraft,
    MemoryType,
    Origin,
    Profile,
    Scope,
    Status,
    Tier,
    Turn,
    Validity,
)
from companion.storage.sqlite import SQLiteStore, decay

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)
ALICE = Scope(101)
BOB = Scope(202)
ALICE_IN_GROUP = Scope(101, -1001234567890)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "memory.sqlite3"


@pytest.fixture
async def storage(db_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(db_path)
    yield opened
    await opened.close()


def draft(event: str = "2025-12-23 感冒发烧", keywords: list[str] | None = None, importance: float = 80.0,
          validity: Validity = Validity.DAYS_30) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=["感冒", "发烧"] if keywords is None else keywords,
                       importance=importance, validity=validity)


def stored(mid: int, importance: float, validity: Validity, last_decay_at: datetime,
           mentioned: datetime | None = None, expires: datetime | None = None, event: str = "") -> Memory:
    created = last_decay_at - DAY
    return Memory(
        id=mid, event=event or f"事件{mid}", keywords=[f"词{mid}"], importance=importance, created_at=created,
        validity=validity, last_mentioned_at=mentioned, updated_at=created,
        expires_at=expires if expires is not None else rules.expires_at(NOW, validity),
        type=MemoryType.FACT, origin=Origin.RESTORE, mention_count=1, last_decay_at=last_decay_at,
    )


def read_pragma(path: Path, pragma: str) -> object:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"PRAGMA {pragma}").fetchone()[0]
    finally:
        conn.close()


def table_names(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


# ---- open and migrations ---------------------------------------------------------------------------


async def test_open_uses_wal(storage: SQLiteStore, db_path: Path) -> None:
    assert read_pragma(db_path, "journal_mode") == "wal"
    assert storage.path == db_path


async def test_open_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "memory.sqlite3"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError):
        await SQLiteStore.open(path)


# ---- scopes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "chat"),
    [
        ("1; DROP TABLE scopes", None),
        (1, "1; DROP TABLE scopes"),
        ('1"', None),
        (0, None),
        (-5, None),
        (2**53, None),
        (1, -(2**53)),
        (1, 0),
        (True, None),
        (1, False),
        (1.0, None),
        (None, None),
        ("", None),
    ],
)
def test_scope_rejects_bad_ids(user: object, chat: object) -> None:
    with pytest.raises(InvalidScopeError):
        Scope(cast(int, user), cast(int | None, chat))


@pytest.mark.parametrize(
    ("scope", "key"),
    [
        (Scope(5), "u5"),
        (Scope(5, 5), "u5"),  # a private chat is the user's own scope
        (Scope(5, -1001234567890), "cn1001234567890_u5"),
        (Scope(5, 777), "cp777_u5"),
        (Scope(cast(int, " 42 ")), "u42"),
        (Scope(2**53 - 1), f"u{2**53 - 1}"),
    ],
)
def test_scope_keys(scope: Scope, key: str) -> None:
    assert scope.key == key
    assert scope.table == f"mem_{key}"
    assert Scope.from_key(key) == scope


@pytest.mark.parametrize("key", ["", "u", "u0", "mem_u1", "u1; DROP TABLE scopes", "u-1", "cx1_u2", "cn1_u", 'u1"'])
def test_scope_from_bad_key(key: str) -> None:
    with pytest.raises(InvalidScopeError):
        Scope.from_key(key)


async def test_scopes_never_see_each_others_rows(storage: SQLiteStore) -> None:
    a = await storage.apply_changes(ALICE, NOW, inserts=[draft("私聊里的事")])
    b = await storage.apply_changes(BOB, NOW, inserts=[draft("鲍勃的事"), draft("鲍勃的另一件事")])
    g = await storage.apply_changes(ALICE_IN_GROUP, NOW, inserts=[draft("群里的事")])
    assert (a, b, g) == ([1], [2, 3], [4])  # handles are unique across the database
    assert [await storage.owner_of(h) for h in (1, 2, 3, 4, 5)] == [ALICE, BOB, BOB, ALICE_IN_GROUP, None]
    assert [m.event for m in await storage.fetch_memories(ALICE)] == ["私聊里的事"]
    assert [m.event for m in await storage.fetch_memories(BOB)] == ["鲍勃的事", "鲍勃的另一件事"]
    assert [m.event for m in await storage.fetch_memories(ALICE_IN_GROUP)] == ["群里的事"]

    # Another scope's handle changes nothing, read or write.
    assert await storage.fetch_by_ids(ALICE, [2, 3, 4]) == []
    await storage.apply_changes(ALICE, NOW, forget=[2, 4])
    await storage.mark_mentioned(ALICE, [4], NOW)
    assert len(await storage.fetch_memories(BOB)) == 2
    assert [m.mention_count for m in await storage.fetch_memories(ALICE_IN_GROUP)] == [0]

    await storage.apply_changes(ALICE, NOW, forget=[1])
    assert await storage.fetch_memories(ALICE) == []
    assert [m.event for m in await storage.fetch_memories(ALICE_IN_GROUP)] == ["群里的事"]
    assert await storage.fetch_memories(Scope(303)) == []
    assert set(await storage.scopes()) == {ALICE, BOB, ALICE_IN_GROUP}
    assert await storage.count_memories() == 3


async def test_active_scopes(storage: SQLiteStore) -> None:
    await storage.set_active(ALICE, True, NOW)
    await storage.set_active(BOB, True, NOW)
    await storage.set_active(BOB, False, NOW)
    assert await storage.active_scopes() == {ALICE}


# ---- exact text ------------------------------------------------------------------------------------

TRICKY_TEXTS = [
    "Robert'); DROP TABLE scopes;--",
    '"; DELETE FROM "mem_u101"; --',
    "1 OR 1=1; SELECT * FROM sqlite_master",
    "😀👍🏽 家人👨‍👩‍👧 🇨🇳",
    "零\u200b宽\u200d字\ufeff符\u2060",
    "控制\x00字\x01符\x07\x1b[31m\r\n\t\x7f",
    "x" * 4096,
    "好" * 4096,
    "'single' \"double\" `back` '''' \\ \\'",
    "=1+1",
    "  前后空格  ",
    "多\n行\r\n文本",
    "%s %d {0} $today ?",
]


@pytest.mark.parametrize("text", TRICKY_TEXTS)
async def test_text_round_trips_exactly(storage: SQLiteStore, text: str) -> None:
    keywords = [text[:20].replace(",", "") or "词", "😀", "'; --"]
    [mid] = await storage.apply_changes(ALICE, NOW, inserts=[draft(text, keywords)])
    [memory] = await storage.fetch_memories(ALICE)
    assert memory.event.encode("utf-8") == text.encode("utf-8")
    assert memory.keywords == keywords

    await storage.apply_changes(ALICE, NOW, updates=[replace(memory, event=text[::-1])])
    [updated] = await storage.fetch_memories(ALICE)
    assert updated.event == text[::-1]
    assert updated.id == mid
    # The text never reached the schema: exactly the shared tables, the one scope table and spares exist.
    assert {n for n in table_names(storage.path) if not re.fullmatch(r"mem_t[1-9][0-9]*", n)} == {
        "scopes", "profiles", "pending_turns", "meta", "sqlite_sequence", "migrations", "memory_handles", "short_term",
        "memory_vectors", "vector_versions", "llm_usage", "spare_tables", "memory_sources", "chat_moves", "settings",
        "memory_changes", "turn_state", "dida_links", "dida_cards", "followup_threads", "followup_scopes", ALICE.table,
    }
    assert [s.key for s in await storage.scopes()] == [ALICE.key]


async def test_insert_fills_bookkeeping_fields(storage: SQLiteStore) -> None:
    created = NOW - 3 * DAY
    d = MemoryDraft(event="对花生过敏", keywords=["花生", "过敏"], importance=150.0, validity=Validity.DAYS_7,
                    type=MemoryType.FACT, origin=Origin.EXPLICIT, created_at=created)
    [mid] = await storage.apply_changes(ALICE, NOW, inserts=[d])
    [m] = await storage.fetch_memories(ALICE)
    assert m == Memory(
        id=mid, event="对花生过敏", keywords=["花生", "过敏"], importance=100.0, created_at=created,
        validity=Validity.DAYS_7, last_mentioned_at=None, updated_at=NOW, expires_at=created + 7 * DAY,
        type=MemoryType.FACT, origin=Origin.EXPLICIT, mention_count=0, last_decay_at=created, tier=Tier.SHORT,
        review_at=NOW + 7 * DAY,
    )


async def test_mark_mentioned(storage: SQLiteStore) -> None:
    await storage.apply_changes(ALICE, NOW, inserts=[draft("a"), draft("b")])
    await storage.mark_mentioned(ALICE, [2], NOW + DAY)
    await storage.mark_mentioned(ALICE, [2], NOW + 2 * DAY)
    a, b = await storage.fetch_memories(ALICE)
    assert (a.mention_count, a.last_mentioned_at) == (0, None)
    assert (b.mention_count, b.last_mentioned_at) == (2, NOW + 2 * DAY)


async def test_failed_write_to_a_new_scope_leaves_storage_usable(storage: SQLiteStore) -> None:
    bad = draft(cast(str, None))  # NOT NULL fails inside the transaction that also creates the table
    with pytest.raises(StorageError):
        await storage.apply_changes(ALICE, NOW, inserts=[bad])
    assert await storage.fetch_memories(ALICE) == []
    assert await storage.count_memories() == 0
    [mid] = await storage.apply_changes(ALICE, NOW, inserts=[draft("之后的记忆")])
    assert [(m.id, m.event) for m in await storage.fetch_memories(ALICE)] == [(mid, "之后的记忆")]


async def test_error_after_sqlite_rolled_back_by_itself_is_not_masked(storage: SQLiteStore) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with storage.transaction() as conn:
            await conn.execute("ROLLBACK")  # what SQLite does on its own after a disk-full or I/O error
            raise Boom
    [mid] = await storage.apply_changes(ALICE, NOW, inserts=[draft()])
    assert [m.id for m in await storage.fetch_memories(ALICE)] == [mid]


def statement(sql: str) -> Callable[[sqlite3.Connection], None]:
    """A whole write of one statement; its cursor stays on the connection's thread (``write_whole``)."""
    def run(conn: sqlite3.Connection) -> None:
        conn.execute(sql)
    return run


async def test_a_whole_write_rolls_back_all_its_statements(storage: SQLiteStore) -> None:
    """``write_whole`` (a turn's write, a usage row): statements sent to the connection's thread together
    still commit together or not at all, and the connection is usable after a failed one."""
    class Boom(Exception):
        pass

    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO settings (name, owner, value) VALUES ('whole', '', 'x')")
        raise Boom

    with pytest.raises(Boom):
        await storage.write_whole(half)
    with pytest.raises(StorageError):
        await storage.write_whole(statement("INSERT INTO no_such_table VALUES (1)"))
    await storage.write_whole(statement("INSERT INTO settings (name, owner, value) VALUES ('whole', '', 'y')"))
    rows = await storage._select("SELECT value FROM settings WHERE name = 'whole'")
    assert [tuple(r) for r in rows] == [("y",)]


async def test_a_whole_write_whose_caller_is_cancelled_before_its_commit_is_rolled_back(
    storage: SQLiteStore,
) -> None:
    """As a transaction sent statement by statement: a turn cancelled at a stop keeps nothing half-done, and
    ``kept_if_abandoned`` queues its text once, not a second time beside a committed copy."""
    started, release = threading.Event(), threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO settings (name, owner, value) VALUES ('cancelled', '', 'x')")
        started.set()
        release.wait(30)

    task = asyncio.create_task(storage.write_whole(slow))
    assert await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await storage.write_whole(statement("INSERT INTO settings (name, owner, value) VALUES ('after', '', 'y')"))
    rows = await storage._select("SELECT name FROM settings WHERE name IN ('cancelled', 'after')")
    assert [tuple(r) for r in rows] == [("after",)]


# ---- pending turns ---------------------------------------------------------------------------------


async def test_pending_turns_queue(storage: SQLiteStore) -> None:
    for i in range(3):
        await storage.add_turn(ALICE, Turn(user=f"第{i}句 😀", reply=None if i == 1 else f"回复{i}", at=NOW + i * DAY))
    await storage.add_turn(BOB, Turn(user="鲍勃", reply="你好", at=NOW))

    first_two = await storage.pending_turns(ALICE, 2)
    assert [(t.user, t.reply, t.at) for t in first_two] == [("第0句 😀", "回复0", NOW), ("第1句 😀", None, NOW + DAY)]
    assert await storage.count_pending(ALICE) == 3
    assert await storage.scopes_with_pending() == sorted([ALICE, BOB], key=lambda s: s.key)

    up_to = max(t.id or 0 for t in first_two)
    ids = await storage.consume_turns(ALICE, up_to, NOW, [draft("提取的记忆")], [])
    assert [m.id for m in await storage.fetch_memories(ALICE)] == ids
    assert [t.user for t in await storage.pending_turns(ALICE, 10)] == ["第2句 😀"]
    assert await storage.count_pending(BOB) == 1

    await storage.clear_turns(ALICE)
    assert await storage.pending_turns(ALICE, 10) == []
    assert await storage.scopes_with_pending() == [BOB]


async def test_consume_turns_is_atomic_with_its_inserts(storage: SQLiteStore) -> None:
    await storage.add_turn(ALICE, Turn(user="我感冒了", reply="多喝水", at=NOW))
    [turn] = await storage.pending_turns(ALICE, 10)
    with pytest.raises(StorageError):
        await storage.consume_turns(ALICE, turn.id or 0, NOW, [draft("好的一条"), draft(cast(str, None))], [])
    assert await storage.fetch_memories(ALICE) == []
    assert [t.id for t in await storage.pending_turns(ALICE, 10)] == [turn.id]

    await storage.consume_turns(ALICE, turn.id or 0, NOW, [draft("好的一条")], [])
    assert [m.event for m in await storage.fetch_memories(ALICE)] == ["好的一条"]
    assert await storage.pending_turns(ALICE, 10) == []


# ---- profiles --------------------------------------------------------------------------------------


async def test_profile_persists_and_goes_stale_on_memory_changes(db_path: Path) -> None:
    first = await SQLiteStore.open(db_path)
    assert await first.load_profile(ALICE) is None
    profile = Profile(core="用户叫小明，对花生过敏。", dynamic=[DynamicTrait("最近感冒", ("感冒", "发烧"))])
    await first.save_profile(ALICE, profile, NOW)
    assert await first.load_profile(ALICE) == (replace(profile, built_at=NOW), False)
    await first.close()

    reopened = await SQLiteStore.open(db_path)
    try:
        assert await reopened.load_profile(ALICE) == (replace(profile, built_at=NOW), False)
        await reopened.apply_changes(ALICE, NOW)  # nothing changed
        assert (await reopened.load_profile(ALICE) or (None, None))[1] is False
        await reopened.mark_mentioned(ALICE, [1], NOW)  # a mention does not change what is known
        assert (await reopened.load_profile(ALICE) or (None, None))[1] is False

        [mid] = await reopened.apply_changes(ALICE, NOW, inserts=[draft()])
        assert (await reopened.load_profile(ALICE) or (None, None))[1] is True
        await reopened.save_profile(ALICE, profile, NOW + DAY)
        assert await reopened.load_profile(ALICE) == (replace(profile, built_at=NOW + DAY), False)

        await reopened.apply_changes(ALICE, NOW, forget=[mid])
        assert (await reopened.load_profile(ALICE) or (None, None))[1] is True
        assert await reopened.load_profile(BOB) is None
    finally:
        await reopened.close()


async def test_cleanup_marks_the_profile_stale(storage: SQLiteStore) -> None:
    await storage.apply_changes(ALICE, NOW, inserts=[draft(importance=10.2)])
    await storage.save_profile(ALICE, Profile(core="x"), NOW)
    await storage.decay_and_clean([ALICE], NOW + DAY)  # 10.2 * 0.95 < 10: removed
    assert await storage.fetch_memories(ALICE) == []
    assert (await storage.load_profile(ALICE) or (None, None))[1] is True


# ---- decay and cleanup through SQL -----------------------------------------------------------------


def expected_after_decay(m: Memory, now: datetime) -> Memory | None:
    importance, anchor = rules.decay(m.importance, m.validity, m.last_decay_at, m.last_mentioned_at, now)
    if rules.removal_reason(importance, m.validity, m.expires_at, m.last_mentioned_at, now) is not None:
        return None
    return replace(m, importance=importance, last_decay_at=anchor)


DECAY_ROWS = [
    stored(1, 80.0, Validity.DAYS_30, NOW - 3 * DAY),
    stored(2, 80.0, Validity.DAYS_30, NOW - 3 * DAY, mentioned=NOW - 2 * DAY - timedelta(hours=6)),
    stored(3, 80.0, Validity.PERMANENT, NOW - 40 * DAY, expires=None),
    stored(4, 80.0, Validity.DAYS_7, NOW - timedelta(hours=23)),  # not a whole day yet
    stored(5, 10.4, Validity.DAYS_30, NOW - DAY),  # fades below 10
    stored(6, 60.0, Validity.DAYS_7, NOW - 10 * DAY, expires=NOW - DAY),  # expired, never mentioned
    stored(7, 60.0, Validity.DAYS_7, NOW - 10 * DAY, mentioned=NOW - 3 * DAY, expires=NOW - DAY),  # kept
    stored(8, 5.0, Validity.PERMANENT, NOW - 10 * DAY, expires=None),  # permanent is never removed
    stored(9, 70.0, Validity.DAYS_30, NOW - 9 * DAY - timedelta(minutes=30), mentioned=NOW - 20 * DAY),
]


async def test_decay_and_clean_in_sql_equals_the_pure_rules(storage: SQLiteStore) -> None:
    await storage.import_rows(ALICE, DECAY_ROWS, NOW)
    assert await storage.fetch_memories(ALICE) == DECAY_ROWS

    decayed, removed = await storage.decay_and_clean([ALICE], NOW)

    expected = [e for e in (expected_after_decay(m, NOW) for m in DECAY_ROWS) if e is not None]
    got = await storage.fetch_memories(ALICE)
    assert [m.id for m in got] == [m.id for m in expected] == [1, 2, 3, 4, 7, 8, 9]
    for actual, wanted in zip(got, expected, strict=True):
        assert actual.importance == pytest.approx(wanted.importance, rel=1e-12)
        assert replace(actual, importance=0.0) == replace(wanted, importance=0.0)
    assert (decayed, removed) == (6, 2)  # rows 1, 2, 5, 6, 7, 9 had a whole day to decay
    assert got[1].importance > got[0].importance  # the mention slowed row 2 down
    tombstones = await storage.fetch_by_ids(ALICE, [5, 6])
    assert [(m.status, m.status_reason, m.event, m.keywords) for m in tombstones] == [
        (Status.FORGOTTEN, "faded", "", []), (Status.FORGOTTEN, "expired", "", [])]

    # A second run the same day changes nothing.
    assert await storage.decay_and_clean([ALICE], NOW + timedelta(minutes=30)) == (0, 0)
    assert await storage.fetch_memories(ALICE) == got


async def test_catch_up_in_sql_equals_daily_runs(tmp_path: Path) -> None:
    daily = await SQLiteStore.open(tmp_path / "daily.sqlite3")
    once = await SQLiteStore.open(tmp_path / "once.sqlite3")
    try:
        rows = [r for r in DECAY_ROWS if r.id in {1, 2, 3, 7, 9}]
        for s in (daily, once):
            await s.import_rows(ALICE, rows, NOW)
        for day in range(1, 6):
            await daily.decay_and_clean([ALICE], NOW + day * DAY)
        await once.decay_and_clean([ALICE], NOW + 5 * DAY)
        a, b = await daily.fetch_memories(ALICE), await once.fetch_memories(ALICE)
    finally:
        await daily.close()
        await once.close()
    assert [m.id for m in a] == [m.id for m in b]
    assert [m.importance for m in a] == pytest.approx([m.importance for m in b], rel=1e-12)
    assert [m.last_decay_at for m in a] == [m.last_decay_at for m in b]


async def test_cleanup_drops_lower_copies_of_the_same_event(storage: SQLiteStore) -> None:
    rows = [
        stored(1, 60.0, Validity.DAYS_30, NOW, event="感冒了"),
        stored(2, 70.0, Validity.DAYS_30, NOW, event="感冒了"),
        stored(3, 70.0, Validity.DAYS_30, NOW, event="感冒了"),
        stored(4, 20.0, Validity.PERMANENT, NOW, event="感冒了", expires=None),
        stored(5, 50.0, Validity.DAYS_30, NOW, event="别的事"),
    ]
    await storage.import_rows(ALICE, rows, NOW)
    assert await storage.decay_and_clean([ALICE], NOW) == (0, 2)
    assert [m.id for m in await storage.fetch_memories(ALICE)] == [3, 4, 5]


async def test_decay_skips_unknown_scopes_and_leaves_others_alone(storage: SQLiteStore) -> None:
    await storage.import_rows(ALICE, [stored(1, 80.0, Validity.DAYS_30, NOW - 2 * DAY)], NOW)
    await storage.import_rows(BOB, [stored(2, 80.0, Validity.DAYS_30, NOW - 2 * DAY)], NOW)
    assert await storage.decay_and_clean([BOB, Scope(999)], NOW) == (1, 0)
    [alice] = await storage.fetch_memories(ALICE)
    [bob] = await storage.fetch_memories(BOB)
    assert alice.importance == 80.0
    assert bob.importance == pytest.approx(80 * 0.95**2)


async def test_a_failing_decay_slice_changes_nothing_and_the_store_goes_on(storage: SQLiteStore) -> None:
    await storage.import_rows(ALICE, [stored(1, 80.0, Validity.DAYS_30, NOW - 2 * DAY)], NOW)
    await storage.import_rows(BOB, [stored(2, 80.0, Validity.DAYS_30, NOW - 2 * DAY)], NOW)
    async with storage.transaction() as conn:
        await conn.execute(f'DROP TABLE "{BOB.table}"')  # broken behind the store's back
    with pytest.raises(StorageError):
        await storage.decay_and_clean([BOB, ALICE], NOW)
    [alice] = await storage.fetch_memories(ALICE)
    assert alice.importance == 80.0  # the decay stopped at the broken table
    assert await storage.decay_and_clean([ALICE], NOW) == (1, 0)  # no transaction left open


@pytest.mark.parametrize("key", ["u1'; DROP TABLE scopes; --", "x1", "u", "cn5_", "u1 "])
def test_a_decay_script_takes_only_scope_keys(key: str) -> None:
    with pytest.raises(ValueError, match="scope key"):
        decay.slice_script(0, [(key, "mem_u1")], NOW)


def test_a_decay_script_inlines_only_numbers_and_stored_times() -> None:
    script = decay.slice_script(3, [("u1", "mem_u1"), ("cn100_u2", "mem_cn100_u2")], NOW)
    assert not re.search(r":(now|day_ago|stamp|week_ago)\b", script)  # every parameter inlined
    assert script.startswith("BEGIN IMMEDIATE;") and script.endswith("COMMIT;")
    with pytest.raises(ValueError, match="stored time"):
        decay._literal("2025-01-01'); DROP TABLE scopes; --")


# ---- a locked database -----------------------------------------------------------------------------


async def test_locked_database_raises_busy_and_recovers(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connection_module, "BUSY_TIMEOUT_MS", 100)
    # No spare tables made in the background: their writes would hold the lock ``other`` asks for.
    storage = await SQLiteStore.open(db_path, spare_tables=0)
    other = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
    try:
        await storage.apply_changes(ALICE, NOW, inserts=[draft("锁之前")])
        await storage.add_turn(ALICE, Turn(user="在吗", reply=None, at=NOW))
        before = await storage.fetch_memories(ALICE)

        other.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises(DatabaseBusyError):
            await storage.apply_changes(ALICE, NOW, inserts=[draft("锁之中")])
        with pytest.raises(DatabaseBusyError):
            await storage.add_turn(ALICE, Turn(user="还在吗", reply=None, at=NOW))
        assert time.monotonic() - started < 3.0  # the patched timeout was used, not five seconds
        other.execute("ROLLBACK")

        assert await storage.fetch_memories(ALICE) == before
        assert [t.user for t in await storage.pending_turns(ALICE, 10)] == ["在吗"]
        await storage.apply_changes(ALICE, NOW, inserts=[draft("锁之后")])
        assert [m.event for m in await storage.fetch_memories(ALICE)] == ["锁之前", "锁之后"]
    finally:
        other.close()
        await storage.close()




async def test_a_scopes_change_counter_moves_whoever_writes_it(storage: SQLiteStore) -> None:
    await storage.apply_changes(ALICE, NOW, inserts=[draft()])
    before, bob = await storage.change_counter(ALICE), await storage.change_counter(BOB)
    await storage.apply_changes(ALICE, NOW, inserts=[draft("爱吃火锅")])  # this store's own write
    mine = await storage.change_counter(ALICE)
    assert mine > before
    other = await SQLiteStore.open(storage.path)  # another process: an operator's command line
    try:
        await other.apply_changes(ALICE, NOW, inserts=[draft("爱吃面条")])
    finally:
        await other.close()
    assert await storage.change_counter(ALICE) > mine
    assert await storage.change_counter(BOB) == bob == 0  # another scope's counter stays
