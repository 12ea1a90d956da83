"""The follow-up threads' store contract, on every backend: dates and flags per memory, one read for what is
due over every scope, and a tombstone's thread gone in the forget's own transaction."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from companion.core.models import MemoryDraft, Scope, Validity, When
from companion.storage.base import MemoryStore

NOW = datetime(2026, 12, 14, 2, 0, tzinfo=UTC)
DAY = date(2026, 12, 14)
A, B, G = Scope(1), Scope(2), Scope(1, -100)


def dated(event: str) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=[event], importance=70, validity=Validity.DAYS_30,
                       happens=When(date(2026, 12, 10)))


async def test_threads_are_due_over_every_scope_in_one_read(store: MemoryStore) -> None:
    a = await store.apply_changes(A, NOW, inserts=[dated("出差"), dated("考试")])
    b = await store.apply_changes(B, NOW, inserts=[dated("面试")])
    g = await store.apply_changes(G, NOW, inserts=[dated("聚餐")])
    later = (DAY + timedelta(days=1), DAY + timedelta(days=5))
    await store.put_threads(A, {a[0]: (DAY, DAY + timedelta(days=3)), a[1]: later})
    await store.put_threads(B, {b[0]: (DAY - timedelta(days=20), DAY - timedelta(days=6))})  # over
    await store.put_threads(G, {g[0]: (DAY - timedelta(days=1), DAY)})
    due = await store.due_threads(DAY, 10)
    assert [(t.scope, t.handle) for t in due] == [(G, g[0]), (A, a[0])]  # by first day
    assert [(t.scope, t.handle) for t in await store.due_threads(DAY, 1)] == [(G, g[0])]
    assert [(t.scope, t.handle) for t in await store.stale_threads(DAY, 10)] == [(B, b[0])]
    # Sent: no longer due, and counted; a stop and an answer are kept.
    assert await store.mark_thread(A, a[0], pushed_at=NOW)
    assert await store.mark_thread(G, g[0], stopped=True)
    assert not await store.mark_thread(B, 999_999, stopped=True)  # no thread: nothing made
    assert await store.due_threads(DAY, 10) == []
    await store.mark_thread(A, a[0], answered=True)
    assert await store.thread_counts() == {"sent": 1, "answered": 1, "stopped": 1}
    mine = {t.handle: t for t in await store.threads_of(A)}
    assert mine[a[0]].pushed_at == NOW and mine[a[0]].answered and not mine[a[0]].stopped
    assert [t.scope for t in await store.threads_of(B)] == [B]  # each scope reads its own only


async def test_new_days_reopen_a_thread_but_a_stop_stays(store: MemoryStore) -> None:
    [h] = await store.apply_changes(A, NOW, inserts=[dated("出差")])
    await store.put_threads(A, {h: (DAY, DAY)})
    await store.mark_thread(A, h, pushed_at=NOW, answered=True)
    await store.put_threads(A, {h: (DAY, DAY + timedelta(days=2))})  # the same event, a longer window
    assert (await store.threads_of(A))[0].pushed_at == NOW
    await store.put_threads(A, {h: (DAY + timedelta(days=7), DAY + timedelta(days=9))})  # moved: a new event
    [moved] = await store.threads_of(A)
    assert moved.pushed_at is None and not moved.answered and moved.due_on == DAY + timedelta(days=7)
    await store.put_threads(A, {h: None})  # archived: closed, never due
    assert (await store.threads_of(A))[0].closed
    assert await store.due_threads(DAY + timedelta(days=8), 10) == []
    await store.put_threads(A, {h: (DAY, DAY)})
    await store.mark_thread(A, h, stopped=True)
    await store.put_threads(A, {h: (DAY + timedelta(days=1), DAY + timedelta(days=1))})
    assert (await store.threads_of(A))[0].stopped
    assert await store.due_threads(DAY + timedelta(days=1), 10) == []


async def test_a_forgotten_memory_takes_its_thread_in_the_same_write(store: MemoryStore) -> None:
    kept, gone = await store.apply_changes(A, NOW, inserts=[dated("出差"), dated("考试")])
    await store.put_threads(A, {kept: (DAY, DAY), gone: (DAY, DAY)})
    await store.apply_changes(A, NOW, forget=[gone])
    assert [t.handle for t in await store.threads_of(A)] == [kept]
    await store.forget_everywhere(A, None, NOW)
    assert await store.threads_of(A) == []


async def test_the_journal_is_read_over_every_scope_in_order(store: MemoryStore) -> None:
    [a] = await store.apply_changes(A, NOW, inserts=[dated("出差")])
    [b] = await store.apply_changes(B, NOW, inserts=[dated("面试")])
    await store.apply_changes(A, NOW, forget=[a])
    found = await store.changes_after(0, 10)
    assert [(c.scope, c.handle) for c in found] == [(A, a), (B, b), (A, a)]
    assert [c.seq for c in found] == sorted(c.seq for c in found)
    assert [(c.scope, c.handle) for c in await store.changes_after(found[0].seq, 1)] == [(B, b)]
