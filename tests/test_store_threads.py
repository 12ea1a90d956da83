"""The follow-up threads' store contract, on every backend: dates and flags per memory, one read for what is
due over every scope, and a tombstone's thread gone in the forget's own transaction."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from companion.core.models import MemoryDraft, Scope, Turn, Validity, When
from companion.storage.base import FollowUpScope, MemoryStore, TurnRecord

NOW = datetime(2026, 12, 14, 2, 0, tzinfo=UTC)
DAY = date(2026, 12, 14)
START = datetime(2026, 12, 13, 16, 0, tzinfo=UTC)  # DAY's first moment in Shanghai
A, B, G = Scope(1), Scope(2), Scope(1, -100)


def dated(event: str) -> MemoryDraft:
    return MemoryDraft(event=event, keywords=[event], importance=70, validity=Validity.DAYS_30,
                       happens=When(date(2026, 12, 10)))


async def test_threads_are_due_over_every_scope_in_one_read(store: MemoryStore) -> None:
    a = await store.apply_changes(A, NOW, inserts=[dated("出差"), dated("考试")])
    b = await store.apply_changes(B, NOW, inserts=[dated("面试")])
    g = await store.apply_changes(G, NOW, inserts=[dated("聚餐")])
    for scope in (A, B, G):
        await store.set_active(scope, True, NOW)
    later = (DAY + timedelta(days=1), DAY + timedelta(days=5))
    await store.put_threads(A, {a[0]: (DAY, DAY + timedelta(days=3)), a[1]: later})
    await store.put_threads(B, {b[0]: (DAY - timedelta(days=20), DAY - timedelta(days=6))})  # over
    await store.put_threads(G, {g[0]: (DAY - timedelta(days=1), DAY)})  # a group's: never written first
    due = await store.due_threads(DAY, START, 10)
    assert [(t.scope, t.handle) for t in due] == [(A, a[0])]
    assert [(t.scope, t.handle) for t in await store.due_threads(DAY + timedelta(days=1), START, 10)] == [
        (A, a[0]), (A, a[1])]
    assert [(t.scope, t.handle) for t in await store.due_threads(DAY + timedelta(days=1), START, 1)] == [(A, a[0])]
    assert [(t.scope, t.handle) for t in await store.stale_threads(DAY, 10)] == [(B, b[0])]
    # Sent: no longer due, and counted; a stop and an answer are kept.
    assert await store.mark_thread(A, a[0], pushed_at=NOW)
    assert await store.mark_thread(G, g[0], stopped=True)
    assert not await store.mark_thread(B, 999_999, stopped=True)  # no thread: nothing made
    assert await store.due_threads(DAY, START, 10) == []
    await store.mark_thread(A, a[0], answered=True)
    assert await store.thread_counts() == {"sent": 1, "answered": 1, "stopped": 1}
    mine = {t.handle: t for t in await store.threads_of(A)}
    assert mine[a[0]].pushed_at == NOW and mine[a[0]].answered and not mine[a[0]].stopped
    assert [t.scope for t in await store.threads_of(B)] == [B]  # each scope reads its own only


async def said(store: MemoryStore, scope: Scope, at: datetime, text: str = "你好") -> None:
    await store.record_turn(scope, TurnRecord(at=at, short=Turn(user=text, reply="嗯", at=at), conversation="{}",
                                              said_at=at))


async def test_due_only_where_the_user_may_be_written_to_today(store: MemoryStore) -> None:
    [h] = await store.apply_changes(A, NOW, inserts=[dated("出差")])
    await store.put_threads(A, {h: (DAY - timedelta(days=3), DAY + timedelta(days=10))})

    async def due(day: int = 0) -> bool:
        return bool(await store.due_threads(DAY + timedelta(days=day), START + timedelta(days=day), 10))

    assert not await due()  # not in companion mode
    await store.set_active(A, True, NOW)
    assert await due()
    assert await store.followup_scope(A) == FollowUpScope()
    await store.set_followups_off(A, True)
    assert not await due() and (await store.followup_scope(A)).off
    await store.set_followups_off(A, False)
    await said(store, A, START + timedelta(hours=1))  # the user wrote today
    assert not await due() and (await store.followup_scope(A)).said_at == START + timedelta(hours=1)
    await store.record_turn(A, TurnRecord(at=START + timedelta(hours=2), short=Turn(user="", reply="问候", at=NOW),
                                          conversation="{}"))  # the companion's own words are not the user's
    assert (await store.followup_scope(A)).said_at == START + timedelta(hours=1)
    assert await due(1)  # the next day
    # Written first on day 1 and day 2, unanswered: the thread reopened by new days stays unsent.
    for day in (1, 2):
        await store.put_threads(A, {h: (DAY + timedelta(days=day), DAY + timedelta(days=day + 5))})
        assert await due(day)
        await store.mark_thread(A, h, pushed_at=START + timedelta(days=day, hours=3))
        assert not await due(day)  # one a day
    await store.put_threads(A, {h: (DAY + timedelta(days=3), DAY + timedelta(days=9))})
    assert (await store.followup_scope(A)).sent == (START + timedelta(days=1, hours=3),
                                                    START + timedelta(days=2, hours=3))
    assert not await due(3)  # two in a row unanswered
    await said(store, A, START + timedelta(days=2, hours=20))
    assert await due(3)


async def test_new_days_reopen_a_thread_but_a_stop_stays(store: MemoryStore) -> None:
    [h] = await store.apply_changes(A, NOW, inserts=[dated("出差")])
    await store.set_active(A, True, NOW)
    await store.put_threads(A, {h: (DAY, DAY)})
    await store.mark_thread(A, h, pushed_at=NOW, answered=True)
    await store.put_threads(A, {h: (DAY, DAY + timedelta(days=2))})  # the same event, a longer window
    assert (await store.threads_of(A))[0].pushed_at == NOW
    await store.put_threads(A, {h: (DAY + timedelta(days=7), DAY + timedelta(days=9))})  # moved: a new event
    [moved] = await store.threads_of(A)
    assert moved.pushed_at is None and not moved.answered and moved.due_on == DAY + timedelta(days=7)
    await store.put_threads(A, {h: None})  # archived: closed, never due
    assert (await store.threads_of(A))[0].closed
    assert await store.due_threads(DAY + timedelta(days=8), START, 10) == []
    await store.put_threads(A, {h: (DAY + timedelta(days=8), DAY + timedelta(days=8))})  # open again
    assert [t.handle for t in await store.due_threads(DAY + timedelta(days=8), START + timedelta(days=8), 10)] == [h]
    await store.mark_thread(A, h, stopped=True)
    await store.put_threads(A, {h: (DAY + timedelta(days=9), DAY + timedelta(days=9))})
    assert (await store.threads_of(A))[0].stopped
    assert await store.due_threads(DAY + timedelta(days=9), START + timedelta(days=9), 10) == []


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
