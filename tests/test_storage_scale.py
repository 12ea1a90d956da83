"""The code paths that make storage scale: bulk handles, fast row decoding, time-sliced decay that other
work can interleave with and that a second run completes exactly, batched CSV publishing, and merge
planning against per-draft candidates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import companion.ops.backup.nightly as backup_module
import companion.storage.sqlite.store as storage_module
from companion.core.extraction import plan_merge
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Validity
from companion.core.rules import new_memory
from companion.core.setting import LAST_DECAY_AT
from companion.ops.backup.nightly import Exported, export_csv
from companion.storage.base import EVERY_STATUS
from companion.storage.rows import HANDLES_PER_STATEMENT, memory_to_row, row_to_memory
from companion.storage.sqlite import SQLiteStore

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)
ALICE = Scope(101)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = await SQLiteStore.open(tmp_path / "m.sqlite3")
    yield opened
    await opened.close()


def draft(n: int, importance: float = 70.0, validity: Validity = Validity.DAYS_30) -> MemoryDraft:
    return MemoryDraft(event=f"第{n}件事", keywords=[f"词{n}", f"字{n}"], importance=importance, validity=validity,
                       created_at=NOW - 3 * DAY)


async def test_bulk_handles_follow_the_drafts_order(store: SQLiteStore) -> None:
    count = HANDLES_PER_STATEMENT * 2 + 7  # more than one statement's worth
    await store.apply_changes(Scope(7), NOW, inserts=[draft(0)])  # another scope's handle first
    ids = await store.apply_changes(ALICE, NOW, inserts=[draft(n) for n in range(count)])
    assert ids == sorted(ids) and len(set(ids)) == count
    stored = await store.fetch_by_ids(ALICE, ids)
    assert [m.event for m in stored] == [f"第{n}件事" for n in range(count)]
    assert {await store.owner_of(h) for h in ids[:: HANDLES_PER_STATEMENT]} == {ALICE}


@pytest.mark.parametrize("stamp", ["2025-12-23T04:00:00Z", "2024-02-29T23:59:59Z"])
def test_fast_time_decoding_equals_the_strict_one(stamp: str) -> None:
    memory = new_memory(draft(1), 5, datetime.fromisoformat(stamp))
    row = memory_to_row(memory)
    assert stamp in row
    back = row_to_memory(row)
    assert back == memory and back.created_at.tzinfo is UTC


def test_a_row_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="values"):
        row_to_memory(memory_to_row(new_memory(draft(1), 5, NOW))[:-1])


async def test_decay_lets_other_work_in_between_its_slices(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    scopes = [Scope(n) for n in range(1, 21)]
    for scope in scopes:
        await store.apply_changes(scope, NOW - 3 * DAY, inserts=[draft(1)])
    monkeypatch.setattr(storage_module, "DECAY_SLICE_S", 0.0)  # one table per transaction
    job = asyncio.create_task(store.decay_and_clean(scopes, NOW))
    await asyncio.sleep(0)  # the decay takes the lock first
    assert await store.get_setting(LAST_DECAY_AT, None) is None
    assert not job.done(), "a read waited for the whole decay instead of one slice"
    assert await job == (20, 0)


async def test_a_decay_cut_short_and_run_again_equals_one_run(tmp_path: Path) -> None:
    scopes = [Scope(n) for n in range(1, 7)]
    stores = [await SQLiteStore.open(tmp_path / f"{name}.sqlite3") for name in ("split", "whole")]
    try:
        for s in stores:
            for scope in scopes:
                drafts = [draft(1, 80.0), draft(2, 11.0), draft(3, 60.0, Validity.DAYS_7),
                          draft(4, 90.0, Validity.PERMANENT)]
                await s.apply_changes(scope, NOW - 9 * DAY, inserts=drafts)
        split, whole = stores
        await split.decay_and_clean(scopes[:3], NOW)  # the run stopped half way
        await split.decay_and_clean(scopes, NOW)  # and was run again
        await whole.decay_and_clean(scopes, NOW)
        for scope in scopes:
            a, b = [await s.fetch_memories(scope, EVERY_STATUS) for s in stores]
            assert [memory_to_row(m) for m in a] == [memory_to_row(m) for m in b]
    finally:
        for s in stores:
            await s.close()


async def test_a_higher_copy_cleaned_now_leaves_the_lower_one(store: SQLiteStore) -> None:
    twin = {"event": "感冒了", "keywords": ["感冒"], "validity": Validity.DAYS_30, "created_at": NOW}
    await store.apply_changes(ALICE, NOW, inserts=[MemoryDraft(importance=40.0, **twin),  # type: ignore[arg-type]
                                                   MemoryDraft(importance=9.0, **twin)])  # type: ignore[arg-type]
    assert await store.decay_and_clean([ALICE], NOW) == (0, 1)
    [kept] = await store.fetch_memories(ALICE)
    assert kept.importance == 40.0


async def test_csv_files_are_published_in_batches(store: SQLiteStore, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for n in range(1, 6):
        await store.apply_changes(Scope(n), NOW, inserts=[draft(n)])
    await store.snapshot(tmp_path / "snap.sqlite3")
    monkeypatch.setattr(backup_module, "PUBLISH_BATCH", 2)
    out = tmp_path / "out"
    out.mkdir()
    assert export_csv(tmp_path / "snap.sqlite3", out, UTC, NOW) == Exported(5, 5)
    assert sorted(p.name for p in out.iterdir()) == [f"u{n}.csv" for n in range(1, 6)]


def test_merge_against_per_draft_candidates_equals_merge_against_all() -> None:
    def memory(mid: int, event: str, keywords: list[str]) -> Memory:
        return Memory(id=mid, event=event, keywords=keywords, importance=50.0, created_at=NOW,
                      validity=Validity.DAYS_30, last_mentioned_at=None, updated_at=NOW, expires_at=None,
                      type=MemoryType.EVENT, origin=Origin.EXTRACTED, mention_count=0, last_decay_at=NOW)

    existing = [memory(1, "感冒了", ["感冒", "医院"]), memory(2, "去爬山", ["爬山", "周末"]),
                memory(3, "换工作", ["工作", "面试"])]
    drafts = [MemoryDraft(event="感冒了！", keywords=["感冒"], importance=80.0),
              MemoryDraft(event="周末去爬山了", keywords=["爬山", "周末"], importance=60.0),
              MemoryDraft(event="新的事", keywords=["别的"], importance=60.0)]

    def near(d: MemoryDraft) -> list[Memory]:
        return [m for m in existing if len(set(m.keywords) & set(d.keywords)) >= 2 or m.event[:2] == d.event[:2]]

    whole, sliced = plan_merge(existing, drafts, NOW), plan_merge((), drafts, NOW, near=near)
    assert [m.id for m in sliced.updates] == [m.id for m in whole.updates] == [1, 2]
    assert sliced == whole
