"""The store contract for the change journal, typed settings and streamed memories, run against every
registered backend (``conftest.store``): every kind of change writes exactly one entry in its own
transaction, a write that fails writes none, the counter is per scope, pruning keeps each scope's newest;
settings keep their types and keys apart and follow a group's move; streaming returns every memory."""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import replace
from itertools import groupby
from zoneinfo import ZoneInfo

import pytest

from companion.core.cells import memory_cells
from companion.core.changes import ChangeOp
from companion.core.csvformat import CELLS, fixed_offset
from companion.core.errors import StorageError
from companion.core.models import Scope, ShortKind, Status, StatusReason, Tier, Turn, Validity
from companion.core.setting import GROUP_MEMORY, LAST_DECAY_AT, LAST_EXTRACTION, MOVED_TO, SHARE_PRIVATE, WEEKLY
from companion.storage.base import MemoryStore
from tests.test_store_contract import ALICE, BOB, DAY, NOW, draft


async def ops_since(store: MemoryStore, scope: Scope, after: int) -> list[tuple[int | None, ChangeOp]]:
    return [(c.handle, c.op) for c in await store.changes_since(scope, after, 1000)]


async def test_every_kind_of_change_writes_exactly_one_entry(store: MemoryStore) -> None:
    async def step() -> int:
        return await store.change_counter(ALICE)

    [a, b, c, d] = await store.apply_changes(ALICE, NOW, inserts=[draft("甲"), draft("乙"), draft("丙"), draft("丁")])
    assert await ops_since(store, ALICE, 0) == [(a, ChangeOp.ADDED), (b, ChangeOp.ADDED), (c, ChangeOp.ADDED),
                                                (d, ChangeOp.ADDED)]
    [ma, mb, mc, md] = await store.fetch_by_ids(ALICE, [a, b, c, d])
    expected = [
        ([replace(ma, event="甲改")], (), "", [(a, ChangeOp.EDITED)]),
        ([replace(mb, tier=Tier.LONG)], (), "", [(b, ChangeOp.TIER_MOVED)]),
        ([replace(mc, status=Status.ARCHIVED, status_reason=StatusReason.USER)], (), "", [(c, ChangeOp.ARCHIVED)]),
        ([replace(mc, status=Status.ACTIVE, status_reason=StatusReason.NONE)], (), "", [(c, ChangeOp.RESTORED)]),
        ([replace(md, status=Status.SUPERSEDED, superseded_by=a)], (), "", [(d, ChangeOp.SUPERSEDED)]),
        ([], [c], StatusReason.EVICTED, [(c, ChangeOp.EVICTED)]),
        ([], [b], StatusReason.USER, [(b, ChangeOp.FORGOTTEN)]),
        ([], [b], StatusReason.USER, []),  # already forgotten: nothing changed, nothing written
    ]
    for updates, forget, reason, entries in expected:
        before = await step()
        await store.apply_changes(ALICE, NOW, updates=updates, forget=forget, reason=reason or "user")
        assert await ops_since(store, ALICE, before) == entries

    before = await step()
    [imported] = await store.import_rows(ALICE, [replace(ma, id=9000)], NOW)
    assert await ops_since(store, ALICE, before) == [(imported, ChangeOp.IMPORTED)]

    before = await step()
    turn = await store.add_turn(ALICE, Turn(user="我在学吉他", reply=None, at=NOW))
    [learned] = await store.consume_turns(ALICE, turn, NOW, [draft("在学吉他")], [])
    assert await ops_since(store, ALICE, before) == [(learned, ChangeOp.ADDED)]

    before = await step()
    await store.forget_everywhere(ALICE, [learned], NOW)
    assert await ops_since(store, ALICE, before) == [(learned, ChangeOp.FORGOTTEN)]

    before = await step()  # an access or a mention is bookkeeping, not a change
    await store.touch(ALICE, [a], NOW)
    await store.mark_mentioned(ALICE, [a], NOW)
    assert await step() == before and await ops_since(store, ALICE, before) == []
    assert await store.change_counter(BOB) == 0


async def test_decay_is_one_entry_per_scope_and_cleanup_one_per_memory(store: MemoryStore) -> None:
    short = await store.apply_changes(ALICE, NOW, inserts=[draft("周末去爬山", validity=Validity.DAYS_7),
                                                           draft("周末去看展", validity=Validity.DAYS_7)])
    await store.apply_changes(ALICE, NOW, inserts=[draft("明年要结婚", validity=Validity.DAYS_30)])
    [kept] = await store.apply_changes(BOB, NOW, inserts=[draft("住在上海", validity=Validity.PERMANENT)])
    alice, bob = await store.change_counter(ALICE), await store.change_counter(BOB)
    decayed, removed = await store.decay_and_clean([ALICE, BOB], NOW + 20 * DAY)
    assert decayed >= 3 and removed == 2
    entries = await ops_since(store, ALICE, alice)
    assert Counter(entries) == Counter([*((h, ChangeOp.CLEANED) for h in short), (None, ChangeOp.DECAYED)])
    assert await store.change_counter(BOB) == bob and kept  # nothing of Bob's decays: no entry
    again = await store.change_counter(ALICE)
    assert await store.decay_and_clean([ALICE], NOW + 20 * DAY) == (0, 0)
    assert await store.change_counter(ALICE) == again  # nothing changed, nothing written


async def test_a_write_that_fails_writes_no_entry(store: MemoryStore) -> None:
    [a] = await store.apply_changes(ALICE, NOW, inserts=[draft("甲")])
    [memory] = await store.fetch_by_ids(ALICE, [a])
    before = await store.change_counter(ALICE)
    with pytest.raises(StorageError):  # the handle is taken: the whole import is refused
        await store.import_rows(ALICE, [replace(memory, id=a + 100), replace(memory, id=a)], NOW)
    assert await store.change_counter(ALICE) == before
    assert await store.changes_since(ALICE, before, 10) == []
    assert [m.id for m in await store.fetch_memories(ALICE, set(Status))] == [a]


async def test_changes_since_pages_in_order_and_counters_grow(store: MemoryStore) -> None:
    ids = await store.apply_changes(ALICE, NOW, inserts=[draft(f"事{n}") for n in range(5)])
    await store.apply_changes(BOB, NOW, inserts=[draft("别人的")])
    first = await store.changes_since(ALICE, 0, 3)
    rest = await store.changes_since(ALICE, first[-1].seq, 10)
    assert [c.handle for c in first + rest] == ids
    seqs = [c.seq for c in first + rest]
    assert seqs == sorted(seqs) and await store.change_counter(ALICE) == seqs[-1]
    assert all(c.scope == ALICE and c.at == NOW for c in first + rest)


async def test_pruning_keeps_each_scopes_newest_entry(store: MemoryStore) -> None:
    await store.apply_changes(ALICE, NOW - 40 * DAY, inserts=[draft("旧的一"), draft("旧的二")])
    await store.apply_changes(BOB, NOW - 40 * DAY, inserts=[draft("旧的")])
    await store.apply_changes(ALICE, NOW, inserts=[draft("新的")])
    alice, bob = await store.change_counter(ALICE), await store.change_counter(BOB)
    assert await store.prune_changes(NOW - 30 * DAY) == 2  # both of Alice's old ones; Bob's only entry stays
    assert [c.op for c in await store.changes_since(ALICE, 0, 10)] == [ChangeOp.ADDED]
    assert await store.change_counter(ALICE) == alice and await store.change_counter(BOB) == bob


async def test_a_move_is_a_scope_wide_entry_for_old_and_new(store: MemoryStore) -> None:
    old, new = Scope(101, -5), Scope(101, -1000000000005)
    await store.apply_changes(old, NOW, inserts=[draft("老群")])
    before = await store.change_counter(old)
    await store.move_chat(-5, -1000000000005, NOW)
    assert await ops_since(store, old, before) == [(None, ChangeOp.MOVED_CHAT)]
    assert await ops_since(store, new, 0) == [(None, ChangeOp.MOVED_CHAT)]


async def test_settings_keep_their_types_and_keys_apart(store: MemoryStore) -> None:
    assert await store.get_setting(WEEKLY, ALICE) is None and await store.get_setting(LAST_DECAY_AT, None) is None
    await store.set_setting(WEEKLY, ALICE, True)
    await store.set_setting(LAST_EXTRACTION, ALICE, NOW)
    await store.set_setting(LAST_DECAY_AT, None, NOW + DAY)
    await store.set_setting(GROUP_MEMORY, -5, False)
    await store.set_setting(SHARE_PRIVATE, 101, True)
    await store.set_setting(MOVED_TO, -5, -1000000000005)
    assert await store.get_setting(WEEKLY, ALICE) is True and await store.get_setting(WEEKLY, BOB) is None
    assert await store.get_setting(LAST_EXTRACTION, ALICE) == NOW
    assert await store.get_setting(LAST_DECAY_AT, None) == NOW + DAY
    assert await store.get_setting(GROUP_MEMORY, -5) is False and await store.get_setting(GROUP_MEMORY, -6) is None
    assert await store.get_setting(SHARE_PRIVATE, 101) is True and await store.get_setting(SHARE_PRIVATE, 202) is None
    assert await store.get_setting(MOVED_TO, -5) == -1000000000005
    await store.set_setting(WEEKLY, ALICE, False)  # a second write replaces the first
    assert await store.get_setting(WEEKLY, ALICE) is False
    with pytest.raises(TypeError):
        await store.set_setting(WEEKLY, 101, True)  # type: ignore[misc]  # keyed by a scope


async def test_stream_memories_returns_every_memory_in_every_status(store: MemoryStore) -> None:
    ids = await store.apply_changes(ALICE, NOW, inserts=[draft(f"事{n}") for n in range(7)])
    await store.apply_changes(ALICE, NOW, forget=ids[:2])
    await store.apply_changes(BOB, NOW, inserts=[draft("别人的")])
    batches = [(scope, [m.id for m in part]) async for scope, part in store.stream_memories(batch=3)]
    assert [(s, len(part)) for s, part in batches] == [(ALICE, 3), (ALICE, 3), (ALICE, 1), (BOB, 1)]
    assert [h for s, part in batches if s == ALICE for h in part] == ids
    only_bob = [(s, [m.event for m in part]) async for s, part in store.stream_memories([BOB])]
    assert only_bob == [(BOB, ["别人的"])]
    assert [x async for x in store.stream_memories([Scope(303)])] == []


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "America/St_Johns"])
async def test_stream_csv_gives_every_scopes_memories_as_csv_lines(store: MemoryStore, zone: str) -> None:
    """Whoever renders them (SQL or Python), the lines are what the csv module writes of ``memory_cells``
    of the streamed memories and the tail, each scope's together in handle order, across reads that hold
    several scopes."""
    tz = ZoneInfo(zone)
    ids = await store.apply_changes(ALICE, NOW, inserts=[draft(f"=事{n}, \"引号\"") for n in range(7)])
    await store.apply_changes(ALICE, NOW, forget=ids[:2])
    await store.apply_changes(BOB, NOW, inserts=[draft("别人的\n两行"), draft("@第二")])
    await store.set_active(Scope(303), True, NOW)  # a scope without memories streams nothing
    chunks = [c async for c in store.stream_csv(CELLS, tz, fixed_offset(tz, NOW), ("区,域",), batch=4)]
    order = [scope for scope, _ in groupby(scope for scope, _, _ in chunks)]
    assert all(count for _, _, count in chunks) and len(order) == len(set(order)) == 2  # each scope's together
    together: dict[Scope, tuple[str, int]] = {}
    for scope, lines, count in chunks:
        text, rows = together.get(scope, ("", 0))
        together[scope] = (text + lines, rows + count)
    out = {}
    async for scope, part in store.stream_memories(batch=100):
        buffer = io.StringIO(newline="")
        csv.writer(buffer).writerows([*memory_cells(m, CELLS, tz), "区,域"] for m in part)
        out[scope] = (buffer.getvalue(), len(part))
    assert together == out and together[ALICE][1] == 7 and together[BOB][0].count('"') >= 4


async def test_short_term_events_move_the_counter_and_turns_do_not(store: MemoryStore) -> None:
    await store.add_short(ALICE, ShortKind.TURN, "在吗", "在", NOW, keep=10)
    assert await store.change_counter(ALICE) == 0  # a turn is read afresh every time: no entry
    await store.add_short(ALICE, ShortKind.EVENT, "吃了感冒药", None, NOW, keep=10)
    before = await store.change_counter(ALICE)
    assert await ops_since(store, ALICE, 0) == [(None, ChangeOp.EVENTS)]
    await store.drop_short(ALICE, kind=ShortKind.TURN)
    assert await store.change_counter(ALICE) == before
    await store.drop_short(ALICE)
    assert await ops_since(store, ALICE, before) == [(None, ChangeOp.EVENTS)]
