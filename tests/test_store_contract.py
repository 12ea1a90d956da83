"""The ``MemoryStore`` contract, run against every backend (SQLite on a real file, the in-memory store and
PostgreSQL in a schema of its own), plus a property test that the set-based SQL decay equals the pure rules
row by row."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.core.extraction import fingerprint
from companion.core.models import (
    Memory,
    MemoryDraft,
    MemoryType,
    Origin,
    Profile,
    Scope,
    ShortKind,
    Status,
    Tier,
    Turn,
    Validity,
    When,
)
from companion.core.setting import GROUP_MEMORY, MOVED_TO, REVIEW_SENT, SHARE_PRIVATE, WEEKLY
from companion.core.usage import UsageRecord
from companion.storage.base import EVERY_STATUS, MemoryStore, TurnRecord, VectorRow
from companion.storage.factory import backends, open_store, sqlite_url
from companion.storage.inmemory import InMemoryStore
from companion.storage.rows import MEMORY_CODECS, memory_to_row, row_to_memory
from companion.storage.sqlite import SQLiteStore
from tests.conftest import STORE_BACKENDS
from tests.pgtest import pg_schema

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)
ALICE, BOB = Scope(101), Scope(202)


def test_every_backend_is_under_contract() -> None:
    assert set(backends()) - {"postgres"} == set(STORE_BACKENDS)  # postgres:// is postgresql:// spelled short


def draft(event: str, **extra: object) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=["词"], importance=70.0, **extra)  # type: ignore[arg-type]


def test_every_memory_field_has_exactly_one_column() -> None:
    fields = [f.name for f in dataclasses.fields(Memory)]
    assert list(MEMORY_CODECS) == fields


def test_a_memory_survives_the_row_mapping() -> None:
    memory = Memory(
        id=7, event="事件", keywords=["a", "b"], importance=55.5, created_at=NOW, validity=Validity.DAYS_7,
        last_mentioned_at=NOW + DAY, updated_at=NOW, expires_at=None, type=MemoryType.FACT, origin=Origin.TOOL,
        mention_count=2, last_decay_at=NOW, terms=["事件"], status=Status.SUPERSEDED, tier=Tier.SHORT,
        review_at=NOW + 7 * DAY, last_accessed_at=NOW, access_count=4, pinned=True, source_chat_id=-100,
        source_message_id=42, source_at=NOW, superseded_by=9, status_reason="replaced", fingerprint="ab",
    )
    assert row_to_memory(memory_to_row(memory)) == memory


async def test_handles_are_unique_and_owned(store: MemoryStore) -> None:
    a = await store.apply_changes(ALICE, NOW, inserts=[draft("甲"), draft("乙")])
    b = await store.apply_changes(BOB, NOW, inserts=[draft("丙")])
    assert len(set(a + b)) == 3
    assert [await store.owner_of(h) for h in a + b] == [ALICE, ALICE, BOB]
    assert await store.owner_of(max(a + b) + 100) is None
    assert await store.fetch_by_ids(BOB, a) == []  # another scope's handles read nothing


async def test_new_memories_take_their_tier_and_source(store: MemoryStore) -> None:
    [h] = await store.apply_changes(ALICE, NOW, inserts=[
        draft("叫我小王", validity=Validity.PERMANENT, origin=Origin.EXPLICIT, source_chat_id=101,
              source_message_id=55, source_at=NOW - DAY)])
    [m] = await store.fetch_memories(ALICE)
    assert (m.id, m.tier, m.origin, m.status) == (h, Tier.LONG, Origin.EXPLICIT, Status.ACTIVE)
    assert (m.source_chat_id, m.source_message_id, m.source_at) == (101, 55, NOW - DAY)


async def test_forget_leaves_a_content_free_tombstone(store: MemoryStore) -> None:
    keep, gone = await store.apply_changes(ALICE, NOW, inserts=[draft("留着"), draft("我对花生过敏")])
    await store.save_profile(ALICE, Profile(core="对花生过敏"), NOW)
    await store.apply_changes(ALICE, NOW + DAY, forget=[gone], reason="user")
    assert [m.id for m in await store.fetch_memories(ALICE)] == [keep]
    [stone] = await store.fetch_by_ids(ALICE, [gone])
    assert (stone.status, stone.event, stone.keywords, stone.terms) == (Status.FORGOTTEN, "", [], [])
    assert (stone.status_reason, stone.updated_at) == ("user", NOW + DAY)
    assert stone.fingerprint == fingerprint("我对花生过敏") and "花生" not in stone.fingerprint
    assert (await store.load_profile(ALICE) or (None, False))[1] is True  # the profile is stale now
    assert await store.owner_of(gone) == ALICE  # the handle stays taken
    assert len(await store.fetch_memories(ALICE, EVERY_STATUS)) == 2
    assert await store.count_memories() == 1


async def test_a_date_is_kept_edited_and_forgotten_with_its_memory(store: MemoryStore) -> None:
    trip = When(date(2025, 12, 31), date(2026, 1, 2))
    birthday = When(date(1990, 5, 20), yearly=True)
    a, b, c = await store.apply_changes(ALICE, NOW, inserts=[
        draft("去杭州出差", happens=trip, validity=Validity.DAYS_7), draft("我的生日", happens=birthday),
        draft("对花生过敏")])
    by_id = {m.id: m for m in await store.fetch_memories(ALICE)}
    assert (by_id[a].happens, by_id[b].happens, by_id[c].happens) == (trip, birthday, None)
    # Lifetime follows the date: a week after the trip's last day; a birthday is lasting.
    assert by_id[a].expires_at == datetime(2026, 1, 10, tzinfo=UTC) and by_id[a].last_decay_at > NOW
    assert (by_id[b].validity, by_id[b].expires_at) == (Validity.PERMANENT, None)
    moved = When(date(2026, 1, 5))
    await store.apply_changes(ALICE, NOW, updates=[dataclasses.replace(by_id[a], happens=moved)])
    assert (await store.fetch_by_ids(ALICE, [a]))[0].happens == moved
    await store.apply_changes(ALICE, NOW + DAY, forget=[a], reason="user")
    [stone] = await store.fetch_by_ids(ALICE, [a])
    assert (stone.status, stone.happens) == (Status.FORGOTTEN, None), "a tombstone keeps no date"
    restored = await store.import_rows(BOB, [by_id[b]], NOW, keep_ids=False)
    assert (await store.fetch_by_ids(BOB, restored))[0].happens == birthday


async def test_import_keeps_or_renews_handles(store: MemoryStore) -> None:
    [h] = await store.apply_changes(ALICE, NOW, inserts=[draft("原有")])
    [m] = await store.fetch_memories(ALICE)
    moved = dataclasses.replace(m, id=h + 50, event="恢复的")
    assert await store.import_rows(BOB, [moved], NOW) == [h + 50]
    renewed = await store.import_rows(BOB, [dataclasses.replace(m, event="旧备份")], NOW, keep_ids=False)
    assert renewed[0] not in (h, h + 50)
    assert [x.event for x in await store.fetch_memories(BOB)] == ["恢复的", "旧备份"]


async def test_turn_queue_and_consume(store: MemoryStore) -> None:
    for text in ("一", "二", "三"):
        await store.add_turn(ALICE, Turn(user=text, reply="嗯", at=NOW, chat_id=101, message_id=len(text)))
    turns = await store.pending_turns(ALICE, 2)
    assert [t.user for t in turns] == ["一", "二"] and turns[0].chat_id == 101
    await store.consume_turns(ALICE, turns[-1].id or 0, NOW, [draft("提取的")], [])
    assert [t.user for t in await store.pending_turns(ALICE, 10)] == ["三"]
    assert await store.scopes_with_pending() == [ALICE]
    assert [m.event for m in await store.fetch_memories(ALICE)] == ["提取的"]


async def told(store: MemoryStore, scope: Scope, text: str, key: str) -> None:
    """One turn, queued and kept as short-term context, under its key."""
    await store.add_turn(scope, Turn(user=text, reply="嗯", at=NOW, key=key))
    await store.add_short(scope, ShortKind.TURN, text, "嗯", NOW, keep=200, keys=(key,))


async def test_forget_everywhere_drops_exactly_the_turns_a_memory_came_from(store: MemoryStore) -> None:
    await told(store, ALICE, "老板说明天不用来了", "k1")
    await told(store, ALICE, "晚饭吃了面", "k2")
    await store.add_short(ALICE, ShortKind.EVENT, "被通知不用上班", None, NOW, keep=30, keys=("k1", "k2"))
    [laid_off] = await store.apply_changes(ALICE, NOW, inserts=[draft("用户失业了")], sources=["k1"])
    [noodles] = await store.apply_changes(ALICE, NOW, inserts=[draft("晚饭吃面")], sources=["k2"])
    # A retelling merged into a memory adds its turn to the memory's sources.
    [merged] = await store.fetch_by_ids(ALICE, [laid_off])
    await store.apply_changes(ALICE, NOW, updates=[dataclasses.replace(merged, importance=80.0)], sources=["k3"])
    await told(store, ALICE, "就是被辞退了", "k3")
    await store.save_profile(ALICE, Profile(core="用户失业了"), NOW)
    assert await store.forgotten_turns(ALICE, ["k1", "k2", "k3"]) == set()

    assert await store.forget_everywhere(ALICE, [laid_off], NOW + DAY) == {"k1", "k3"}
    assert [t.user for t in await store.pending_turns(ALICE, 10)] == ["晚饭吃了面"]
    assert [i.user for i in await store.short_items(ALICE, ShortKind.TURN, 10)] == ["晚饭吃了面"]
    assert await store.short_items(ALICE, ShortKind.EVENT, 10) == []  # the batch that told it
    assert await store.load_profile(ALICE) is None
    [stone] = await store.fetch_by_ids(ALICE, [laid_off])
    assert (stone.status, stone.event, stone.keywords) == (Status.FORGOTTEN, "", [])
    assert [m.id for m in await store.fetch_memories(ALICE)] == [noodles]
    # The tombstone keeps only the turns' random keys: enough to refuse them later, nothing they said.
    assert await store.forgotten_turns(ALICE, ["k1", "k2", "k3", "k9"]) == {"k1", "k3"}
    assert await store.forgotten_turns(BOB, ["k1"]) == set()


async def test_forget_everywhere_also_drops_items_named_by_id(store: MemoryStore) -> None:
    await told(store, ALICE, "旧的一句", "k1")
    await told(store, ALICE, "另一句", "k2")
    [h] = await store.apply_changes(ALICE, NOW, inserts=[draft("没有来源的记忆")])
    [first, _] = await store.pending_turns(ALICE, 10)
    [item, _] = await store.short_items(ALICE, ShortKind.TURN, 10)
    assert await store.forget_everywhere(ALICE, [h], NOW, queued=[first.id or 0], short=[item.id]) == set()
    assert [t.user for t in await store.pending_turns(ALICE, 10)] == ["另一句"]
    assert [i.user for i in await store.short_items(ALICE, ShortKind.TURN, 10)] == ["另一句"]


async def test_forget_everything_empties_the_queue_and_short_term(store: MemoryStore) -> None:
    await told(store, ALICE, "我养了一只猫", "k1")
    await store.add_short(ALICE, ShortKind.EVENT, "喂了猫", None, NOW, keep=30)
    await told(store, BOB, "鲍勃的话", "k2")
    [h] = await store.apply_changes(ALICE, NOW, inserts=[draft("喜欢奶茶")])
    await store.save_profile(ALICE, Profile(core="喜欢奶茶"), NOW)
    await store.forget_everywhere(ALICE, None, NOW)
    assert await store.fetch_memories(ALICE) == [] and len(await store.fetch_by_ids(ALICE, [h])) == 1
    assert await store.pending_turns(ALICE, 10) == []
    assert await store.short_items(ALICE, ShortKind.TURN, 10) == []
    assert await store.short_items(ALICE, ShortKind.EVENT, 10) == []
    assert await store.load_profile(ALICE) is None
    # Nothing of another scope moves.
    assert [t.user for t in await store.pending_turns(BOB, 10)] == ["鲍勃的话"]
    assert [i.user for i in await store.short_items(BOB, ShortKind.TURN, 10)] == ["鲍勃的话"]


async def test_forget_everywhere_in_a_scope_never_seen_creates_nothing(store: MemoryStore) -> None:
    await store.apply_changes(ALICE, NOW, inserts=[draft("甲")])
    before = await store.scopes()
    assert await store.forget_everywhere(Scope(999), [1, 2], NOW) == set()
    assert await store.forget_everywhere(Scope(999), None, NOW) == set()
    assert await store.scopes() == before
    assert len(await store.fetch_memories(ALICE)) == 1


async def test_move_chat_moves_every_scope_of_the_chat(store: MemoryStore) -> None:
    old_a, old_b, new_a, other = Scope(101, -5), Scope(202, -5), Scope(101, -1000000000005), Scope(101, -6)
    [ha] = await store.apply_changes(old_a, NOW, inserts=[draft("老群甲")])
    await store.apply_changes(old_b, NOW, inserts=[draft("老群乙")])
    await store.apply_changes(other, NOW, inserts=[draft("别的群")])
    await store.apply_changes(new_a, NOW, inserts=[draft("新群里先说的")])  # written before the move was seen
    await store.set_active(old_a, True, NOW)
    await store.add_turn(old_a, Turn(user="排队的", reply=None, at=NOW))
    await store.add_short(old_a, ShortKind.TURN, "刚才说的", "嗯", NOW, keep=10)
    await store.save_profile(old_b, Profile(core="核心"), NOW)
    await store.set_setting(REVIEW_SENT, old_a, NOW)
    await store.set_setting(WEEKLY, new_a, True)
    await store.set_setting(WEEKLY, old_a, False)
    await store.set_setting(GROUP_MEMORY, -5, False)
    await store.set_setting(GROUP_MEMORY, -55, True)
    await store.set_setting(MOVED_TO, -5, -1000000000005)
    await store.set_setting(SHARE_PRIVATE, 101, True)

    assert sorted(s.key for s in await store.move_chat(-5, -1000000000005, NOW)) == sorted([old_a.key, old_b.key])
    new_b = Scope(202, -1000000000005)
    assert sorted(m.event for m in await store.fetch_memories(new_a)) == ["新群里先说的", "老群甲"]
    assert [m.event for m in await store.fetch_memories(new_b)] == ["老群乙"]
    assert await store.fetch_memories(old_a) == [] and await store.owner_of(ha) == new_a
    assert [m.event for m in await store.fetch_memories(other)] == ["别的群"]
    assert {s.key for s in await store.scopes()} == {new_a.key, new_b.key, other.key}
    assert await store.active_scopes() == {new_a}
    assert [t.user for t in await store.pending_turns(new_a, 10)] == ["排队的"]
    assert [i.user for i in await store.short_items(new_a, ShortKind.TURN, 10)] == ["刚才说的"]
    assert (await store.load_profile(new_b)) is not None and await store.load_profile(old_b) is None
    assert await store.get_setting(REVIEW_SENT, new_a) == NOW
    assert await store.get_setting(WEEKLY, new_a) is True  # the new scope's own state wins
    assert await store.get_setting(WEEKLY, old_a) is None
    assert await store.get_setting(GROUP_MEMORY, -1000000000005) is False
    assert await store.get_setting(GROUP_MEMORY, -5) is None
    assert await store.get_setting(GROUP_MEMORY, -55) is True  # another chat's is not moved
    assert await store.get_setting(MOVED_TO, -5) == -1000000000005  # the old id's own record stays
    assert await store.get_setting(SHARE_PRIVATE, 101) is True

    assert await store.move_chat(-5, -1000000000005, NOW) == []  # the second notice moves nothing
    assert len(await store.fetch_memories(new_a)) == 2


async def test_a_move_leaves_a_marker_until_it_completes(store: MemoryStore) -> None:
    assert await store.unfinished_moves() == []
    await store.begin_move(-5, -1000000000005, NOW)
    await store.begin_move(-5, -1000000000005, NOW + DAY)  # written again (a restart resumes): one marker
    await store.begin_move(-7, -1000000000007, NOW)
    assert sorted(await store.unfinished_moves()) == [(-7, -1000000000007), (-5, -1000000000005)]
    await store.move_chat(-5, -1000000000005, NOW)
    assert await store.unfinished_moves() == [(-7, -1000000000007)]
    await store.move_chat(-7, -1000000000007, NOW)  # a chat with no scopes: the marker still goes
    assert await store.unfinished_moves() == []


# ---- SQL decay equals the pure rules ---------------------------------------------------------------

HOURS = st.integers(min_value=0, max_value=24 * 60)


@st.composite
def rows(draw: st.DrawFn) -> list[Memory]:
    out = []
    for handle in range(1, draw(st.integers(1, 8)) + 1):
        validity = draw(st.sampled_from(list(Validity)))
        anchor = NOW - timedelta(hours=draw(HOURS))
        mentioned = draw(st.none() | HOURS.map(lambda h: NOW - timedelta(hours=h)))
        expires = draw(st.none() | st.integers(-2000, 2000).map(lambda h: NOW + timedelta(hours=h)))
        out.append(Memory(
            id=handle, event=draw(st.sampled_from(["同一件事", "另一件事", f"事{handle}"])), keywords=["词"],
            importance=draw(st.floats(0, 100, allow_nan=False)), created_at=anchor - DAY, validity=validity,
            last_mentioned_at=mentioned, updated_at=anchor, expires_at=expires, type=MemoryType.EVENT,
            origin=Origin.EXTRACTED, mention_count=0, last_decay_at=anchor,
            tier=draw(st.sampled_from(list(Tier))), pinned=draw(st.booleans()),
        ))
    return out


@asynccontextmanager
async def sql_store(backend: str) -> AsyncIterator[MemoryStore]:
    """An empty store of a backend whose decay is SQL."""
    if backend == "postgresql":
        async with pg_schema() as url:
            opened = await open_store(url)
            try:
                yield opened
            finally:
                await opened.close()
        return
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = await SQLiteStore.open(Path(tmp) / "m.sqlite3")
        try:
            yield sqlite
        finally:
            await sqlite.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(memories=rows(), later=st.integers(min_value=0, max_value=24 * 90))
async def test_sql_decay_and_cleanup_equal_the_pure_rules(backend: str, memories: list[Memory], later: int) -> None:
    now = NOW + timedelta(hours=later)
    fake = InMemoryStore()
    async with sql_store(backend) as sql:
        for s in (sql, fake):
            await s.import_rows(ALICE, memories, NOW)
        counts = [await s.decay_and_clean([ALICE], now) for s in (sql, fake)]
        got, want = [await s.fetch_memories(ALICE, EVERY_STATUS) for s in (sql, fake)]
    assert counts[0] == counts[1]
    for a, b in zip(got, want, strict=True):
        assert a.importance == pytest.approx(b.importance, rel=1e-12, abs=1e-12)
        assert dataclasses.replace(a, importance=0.0, updated_at=NOW) == dataclasses.replace(
            b, importance=0.0, updated_at=NOW)


async def test_forgetting_in_an_unknown_scope_creates_nothing(store: MemoryStore) -> None:
    stranger = Scope(999, -424242)
    assert await store.apply_changes(stranger, NOW, forget=[1, 2, 3]) == []
    assert await store.apply_changes(stranger, NOW) == []
    assert await store.fetch_memories(stranger, EVERY_STATUS) == []
    assert await store.scopes() == []


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
async def test_another_writer_moves_the_scopes_counter(backend: str, tmp_path: Path) -> None:
    """Two store objects on one database (two processes): a write by either moves the scope's counter
    both read, and no other scope's."""
    async with contextlib.AsyncExitStack() as stack:
        url = (await stack.enter_async_context(pg_schema()) if backend == "postgresql"
               else sqlite_url(tmp_path / "m.sqlite3"))
        mine, other = await open_store(url), await open_store(url)
        stack.push_async_callback(other.close)
        stack.push_async_callback(mine.close)
        await mine.apply_changes(ALICE, NOW, inserts=[draft("自己写的")])
        start, bob = await mine.change_counter(ALICE), await mine.change_counter(BOB)
        assert start > 0 and await other.change_counter(ALICE) == start
        await other.apply_changes(ALICE, NOW, inserts=[draft("别人写的")])
        assert await mine.change_counter(ALICE) > start and await mine.change_counter(BOB) == bob


async def test_settings_are_listed_as_stored(store: MemoryStore) -> None:
    await store.set_setting(WEEKLY, ALICE, True)
    await store.set_setting(GROUP_MEMORY, -5, False)
    await store.set_setting(MOVED_TO, -5, -1000000000005)
    await store.set_setting(WEEKLY, ALICE, False)
    assert await store.all_settings() == [("group_memory", "-5", "off"), ("moved_to", "-5", "-1000000000005"),
                                          ("weekly", ALICE.key, "off")]


async def test_usage_rows_come_back_in_pages_in_the_order_written(store: MemoryStore) -> None:
    usage = store.usage_log()
    if usage is None:
        assert isinstance(store, InMemoryStore)  # the one backend without a usage log
        return
    rows = [UsageRecord(NOW + timedelta(minutes=n), "reply" if n % 2 else "extract", "m", n, 2 * n,
                     None if n == 3 else n, None if n == 3 else 0, 1.5 * n, ok=n != 4, tool_calls=n % 3)
            for n in range(7)]
    for row in rows:
        await usage.add(row)
    first = await usage.page(0, 4)
    rest = await usage.page(first[-1][0], 10)
    assert [r for _, r in first + rest] == rows and await usage.page(rest[-1][0], 10) == []
    [day] = {c.day for c in await usage.report(NOW - DAY, timedelta(hours=8))}
    assert day == "2025-12-23"
    cells = await usage.report(NOW - DAY, timedelta(0))
    assert [(c.purpose, c.calls, c.failures, c.tool_calls) for c in cells] == [("extract", 4, 1, 3), ("reply", 3, 0, 3)]



async def test_usage_rows_written_at_once_are_all_kept(store: MemoryStore) -> None:
    """The model calls that finish together under load: every row is kept, whatever shares a write."""
    usage = store.usage_log()
    if usage is None:
        return
    rows = [UsageRecord(NOW, "reply", "m", n, 1, None, None, 2.0) for n in range(40)]
    await asyncio.gather(*(usage.add(row) for row in rows))
    await usage.add(rows[0])
    kept = [r for _, r in await usage.page(0, 100)]
    assert sorted(r.prompt_tokens for r in kept) == sorted([*range(40), 0])

# ---- the vectors capability, on every backend that has one ------------------------------------------


def unit(*values: float) -> list[float]:
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


async def test_vectors_stay_in_their_scope_and_go_with_their_memory(store: MemoryStore) -> None:
    vectors = await store.open_vectors()
    if vectors is None:
        assert isinstance(store, InMemoryStore)
        return
    try:
        a1, a2, a3 = await store.apply_changes(ALICE, NOW, inserts=[draft("猫"), draft("狗"), draft("鱼")])
        [b1] = await store.apply_changes(BOB, NOW, inserts=[draft("猫")])
        rows = [VectorRow(a1, "h1", unit(1, 0, 0)), VectorRow(a2, "h2", unit(0, 1, 0)),
                VectorRow(a3, "h3", unit(1, 1, 0))]
        assert await vectors.put(ALICE, "m", rows, NOW) == 3
        assert await vectors.put(ALICE, "m", [VectorRow(b1, "x", unit(1, 0, 0))], NOW) == 0  # Bob's handle
        assert await vectors.put(BOB, "m", [VectorRow(b1, "hb", unit(1, 0, 0))], NOW) == 1
        assert await vectors.put(ALICE, "old", [VectorRow(a1, "h1", unit(0, 0, 1))], NOW) == 1  # replaces a1's
        await vectors.put(ALICE, "m", rows[:1], NOW)
        assert await vectors.hashes(ALICE, "m") == {a1: "h1", a2: "h2", a3: "h3"}
        nearest = await vectors.nearest(ALICE, "m", unit(1, 0.1, 0), 2)
        assert [h for h, _ in nearest] == [a1, a3] and nearest[0][1] == pytest.approx(0.995, abs=1e-3)
        assert [h for h, _ in await vectors.nearest(BOB, "m", unit(1, 0, 0), 5)] == [b1]
        await store.forget_everywhere(ALICE, [a2], NOW)
        assert set(await vectors.hashes(ALICE, "m")) == {a1, a3}
        await store.apply_changes(ALICE, NOW, forget=[a3])  # a tombstone without the vector's own delete
        assert await vectors.prune(ALICE) == 1 and await vectors.count() == 2
        assert await vectors.put(ALICE, "other", [VectorRow(a1, "h9", unit(0, 0, 1))], NOW) == 1
        assert await vectors.drop_other_models("other") == 1 and await vectors.count("other") == 1
        assert await vectors.delete([a1, b1]) == 1 and await vectors.count() == 0
    finally:
        await vectors.close()


async def test_one_turn_reads_what_the_reply_needs_at_once(store: MemoryStore) -> None:
    empty = await store.turn_context(ALICE, events=5, turns=10, memories=True)
    assert (empty.active, empty.profile, empty.events, empty.turns, empty.memories) == (False, None, [], [], [])
    assert await store.scopes() == []  # reading a scope never seen creates nothing
    await store.set_active(ALICE, True, NOW)
    [a] = await store.apply_changes(ALICE, NOW, inserts=[draft("养了一只猫叫咪咪")])
    await store.save_profile(ALICE, Profile(core="喜欢猫"), NOW)
    for i in range(3):
        await store.add_short(ALICE, ShortKind.EVENT, f"吃了第{i}次药", None, NOW, keep=30)
    await store.add_short(ALICE, ShortKind.TURN, "你好", "嗨", NOW, keep=200, keys=("k1",))
    view = await store.turn_context(ALICE, events=2, turns=10, memories=True)
    assert view.active and view.profile is not None and view.profile[0].core == "喜欢猫"
    assert [e.user for e in view.events] == ["吃了第1次药", "吃了第2次药"]
    assert [(t.user, t.reply, t.keys) for t in view.turns] == [("你好", "嗨", ("k1",))]
    assert view.memories is not None and [m.id for m in view.memories] == [a]
    light = await store.turn_context(ALICE, events=2)
    assert light.turns == [] and light.memories is None and light.change == view.change
    assert (await store.turn_context(BOB, events=2, memories=True)).memories == []  # nothing of Alice's


async def test_one_turn_is_recorded_at_once(store: MemoryStore) -> None:
    a, b = await store.apply_changes(ALICE, NOW, inserts=[draft("一件事"), draft("另一件事")])
    waiting = Turn("早上好", None, NOW - DAY, key="k1")
    turn = Turn("我今天好累", "辛苦了", NOW, key="k2")
    await store.record_turn(ALICE, TurnRecord(at=NOW, short=turn, keep=1, recalled=True, queued=[waiting, turn],
                                              touched=[a, b], mentioned=[a]))
    assert [(t.user, t.key) for t in await store.pending_turns(ALICE, 10)] == [("早上好", "k1"), ("我今天好累", "k2")]
    [short] = await store.short_items(ALICE, ShortKind.TURN, 10)
    assert (short.user, short.reply, short.recalled, short.keys) == ("我今天好累", "辛苦了", True, ("k2",))
    rows = {m.id: m for m in await store.fetch_memories(ALICE)}
    assert (rows[a].access_count, rows[b].access_count) == (1, 1)
    assert (rows[a].mention_count, rows[b].mention_count) == (1, 0) and rows[a].last_mentioned_at == NOW
    await store.record_turn(ALICE, TurnRecord(at=NOW, short=Turn("再见", None, NOW, key="k3"), keep=1))
    assert [i.user for i in await store.short_items(ALICE, ShortKind.TURN, 10)] == ["再见"]  # the newest ``keep``
    assert await store.count_pending(ALICE) == 2
    await store.record_turn(BOB, TurnRecord(at=NOW, queued=[Turn("你好", None, NOW)], touched=[a], mentioned=[a]))
    assert await store.count_pending(BOB) == 1
    assert {m.id: m.access_count for m in await store.fetch_memories(ALICE)}[a] == 1  # Bob cannot touch Alice's


async def test_an_update_never_writes_back_the_usage_counts_it_read(store: MemoryStore) -> None:
    """A retelling or an edit writes a row read earlier (often from a cached index that never saw the
    accesses since): its words and importance land, the row's own access and mention counts stay."""
    [a] = await store.apply_changes(ALICE, NOW, inserts=[draft("在学吉他")])
    [stale] = await store.fetch_memories(ALICE)
    later = NOW + DAY
    await store.record_turn(ALICE, TurnRecord(at=later, touched=[a], mentioned=[a]))
    await store.record_turn(ALICE, TurnRecord(at=later, touched=[a]))
    await store.apply_changes(ALICE, later, updates=[dataclasses.replace(stale, event="最近在学吉他", importance=70.0)])
    [row] = await store.fetch_memories(ALICE)
    assert (row.event, row.importance) == ("最近在学吉他", 70.0)
    assert (row.access_count, row.last_accessed_at, row.mention_count, row.last_mentioned_at) == (2, later, 1, later)


async def test_a_turn_reads_its_settings_and_keeps_the_conversation_state(store: MemoryStore) -> None:
    member, elsewhere = Scope(101, -7), Scope(101, -8)
    fresh = await store.turn_context(member, events=0)
    assert (fresh.review_sent, fresh.group_memory, fresh.share_private, fresh.conversation) == (None, True, False, None)
    await store.set_setting(REVIEW_SENT, member, NOW)
    await store.set_setting(GROUP_MEMORY, -7, False)
    await store.set_setting(SHARE_PRIVATE, 101, True)
    await store.set_editing(member, 5)
    await store.record_turn(member, TurnRecord(at=NOW, conversation='{"turn":3}'))
    await store.set_hinted(member, NOW)
    view = await store.turn_context(member, events=0)
    assert (view.review_sent, view.group_memory, view.share_private) == (NOW, False, True)
    assert (view.conversation, view.editing, view.hinted_at) == ('{"turn":3}', 5, NOW)  # each keeps the others'
    assert fresh.hinted_at is None and (await store.turn_context(elsewhere, events=0)).hinted_at is None
    other = await store.turn_context(elsewhere, events=0)
    assert (other.group_memory, other.share_private, other.conversation) == (True, True, None)
    alone = await store.turn_context(ALICE, events=0)  # a private scope: no group switches apply
    assert (alone.group_memory, alone.share_private, alone.review_sent) == (True, False, None)
    await store.record_turn(member, TurnRecord(at=NOW))  # None: the state stays
    assert (await store.turn_context(member, events=0)).conversation == '{"turn":3}'
    await store.record_turn(member, TurnRecord(at=NOW, conversation=""))  # "": it goes
    assert (await store.turn_context(member, events=0)).conversation is None


async def test_every_forget_moves_the_scopes_forget_count(store: MemoryStore) -> None:
    """What a conversation held in another process compares (``TurnView.forgot``): a memory forgotten, or
    everything (with no memory at all), each moves it, with the conversation's own state kept."""
    [a] = await store.apply_changes(ALICE, NOW, inserts=[MemoryDraft("喜欢猫", ["猫"], 50.0)])
    await store.record_turn(ALICE, TurnRecord(at=NOW, conversation='{"turn":2}'))
    assert (await store.turn_context(ALICE, events=0)).forgot == 0
    await store.forget_everywhere(ALICE, [a], NOW)
    assert (await store.turn_context(ALICE, events=0)).forgot == 1
    await store.set_active(BOB, True, NOW)
    await store.forget_everywhere(BOB, None, NOW)  # nothing to forget but turns: it counts too
    assert (await store.turn_context(BOB, events=0)).forgot == 1
    await store.forget_everywhere(ALICE, None, NOW)
    view = await store.turn_context(ALICE, events=0)
    assert (view.forgot, view.conversation) == (2, '{"turn":2}')
    unseen = Scope(999)
    await store.forget_everywhere(unseen, None, NOW)
    assert unseen not in await store.scopes() and (await store.turn_context(unseen, events=0)).forgot == 0


async def test_the_turns_a_memory_came_from_are_read_and_written_with_it(store: MemoryStore) -> None:
    [a, b] = await store.apply_changes(ALICE, NOW, inserts=[draft("甲"), draft("乙")], sources=["k1", "k2"])
    [c] = await store.apply_changes(BOB, NOW, inserts=[draft("丙")], sources=["k9"])
    assert await store.sources_of(ALICE, [a, b, c]) == {a: {"k1", "k2"}, b: {"k1", "k2"}}  # Bob's is not Alice's
    [memory] = await store.fetch_by_ids(ALICE, [a])
    kept = await store.import_rows(Scope(303), [dataclasses.replace(memory, id=a + 500)], NOW,
                                   sources={a + 500: ["k7"]})
    renewed = await store.import_rows(Scope(303), [memory], NOW, keep_ids=False, sources={a: ["k8"]})
    assert await store.sources_of(Scope(303), kept + renewed) == {kept[0]: {"k7"}, renewed[0]: {"k8"}}
    await told(store, Scope(303), "复制来的那句话", "k8")
    assert await store.forget_everywhere(Scope(303), renewed, NOW) == {"k8"}
    assert await store.pending_turns(Scope(303), 10) == []  # forgetting follows the copied provenance


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("importance", [5e-324, 1e-300, 0.0])
async def test_decay_of_a_vanishing_importance_or_after_years_matches_the_rules(
        backend: str, importance: float) -> None:
    """Float underflow: PostgreSQL raises where Python and SQLite give 0.0."""
    old = Memory(id=1, event="很久以前", keywords=["词"], importance=importance, created_at=NOW - 3000 * DAY,
                 validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=NOW - 3000 * DAY, expires_at=None,
                 type=MemoryType.EVENT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=NOW - 3000 * DAY)
    big = dataclasses.replace(old, id=2, event="很久以前的大事", importance=100.0)
    fake = InMemoryStore()
    async with sql_store(backend) as sql:
        for s in (sql, fake):
            await s.import_rows(ALICE, [old, big], NOW)
        assert await sql.decay_and_clean([ALICE], NOW) == await fake.decay_and_clean([ALICE], NOW)
        got, want = [await s.fetch_memories(ALICE, EVERY_STATUS) for s in (sql, fake)]
    assert [(m.status, m.status_reason, m.importance) for m in got] == [
        (m.status, m.status_reason, m.importance) for m in want]


async def test_dida_state_is_kept_per_user_and_unlinking_drops_the_cards(store: MemoryStore) -> None:
    assert await store.dida_link(7) is None and await store.dida_users() == []
    await store.put_dida_link(7, '{"a": 1}')
    await store.put_dida_link(8, '{"b": 2}')
    await store.put_dida_link(7, '{"a": 2}')
    await store.put_dida_cards(7, {1: "one", 2: "two"})
    await store.put_dida_cards(8, {1: "other"})
    await store.put_dida_cards(7, {1: None, 3: "three"})
    assert await store.dida_link(7) == '{"a": 2}' and await store.dida_users() == [7, 8]
    assert await store.dida_cards(7) == {2: "two", 3: "three"}
    await store.put_dida_link(7, None)
    assert await store.dida_link(7) is None and await store.dida_cards(7) == {}
    assert await store.dida_users() == [8] and await store.dida_cards(8) == {1: "other"}
