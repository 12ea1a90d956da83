"""The Dida365 kanban's sync against the fake Dida365 (tests/fakes/dida.py), on a real engine and SQLite store:
link, push, pull of every user action, outages, the rate limit, a revoked token, a deleted project, a server
that ignores ``columnId``, a lost create answer, and one user's cards never reaching another's account."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.core.models import MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.core.text import MAX_MEMORY_CHARS
from companion.core.timeutil import utcnow
from companion.kanban.card_records import CardState, Link, LinkState, TokenBox
from companion.kanban.dida_api import DidaClient
from companion.kanban.pull import Puller
from companion.kanban.sync import DidaConfig, KanbanSync, Round
from tests.fakes import FakeLLM
from tests.fakes.dida import CLIENT_ID, CLIENT_SECRET, FakeDida
from tests.support import Rig, close_rig, make_settings, open_rig

ALICE = 5101


@dataclass
class Kit:
    fake: FakeDida
    sync: KanbanSync
    rig: Rig

    async def round(self, user: int = ALICE, **kw: bool) -> Round:
        return await self.sync.sync(user, self.rig.clock(), **kw)

    async def save(self, text: str, tier: Tier, user: int = ALICE, importance: float = 60.0) -> int:
        draft = MemoryDraft(event=text, keywords=[], importance=importance, tier=tier, type=MemoryType.FACT,
                            validity=Validity.PERMANENT if tier is Tier.LONG else Validity.DAYS_30)
        return (await self.rig.engine.save(Scope(user), draft, self.rig.clock())).memory.id


@pytest.fixture(params=["journal", "compare"])
async def kit(rig: Rig, request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    """The sync reading the store's change journal, and (a store without one) comparing every memory."""
    async with FakeDida() as fake:
        client = DidaClient(fake.base_url, fake.base_url)
        config = DidaConfig(CLIENT_ID, CLIENT_SECRET, "http://127.0.0.1/cb", rig.settings.tz)
        port = rig.engine.kanban
        outbox = port if request.param == "journal" else None
        sync = KanbanSync(client, port, rig.engine, outbox, TokenBox(Fernet.generate_key().decode()), config,
                          rig.chat.forget)
        try:
            yield Kit(fake, sync, rig)
        finally:
            await client.close()


async def linked(kit: Kit, user: int = ALICE, account: str = "alice") -> Round:
    return await kit.sync.link(user, kit.fake.grant_code(account), kit.rig.clock())


async def test_linking_builds_the_board_and_pushes_every_memory_once(kit: Kit) -> None:
    long = await kit.save("每周一不要打扰我", Tier.LONG)
    await kit.save("在准备雅思考试", Tier.MEDIUM)
    done = await linked(kit)
    assert done.pushed == 2
    project = kit.fake.project("alice")
    assert project is not None and project["viewMode"] == "kanban"
    names = [c["name"] for c in kit.fake.accounts["alice"].columns[project["id"]]]
    assert names == ["短期记忆", "中期记忆", "长期记忆"]
    card = kit.fake.card("alice", "每周一不要打扰我")
    assert kit.fake.column_name("alice", card) == "长期记忆"
    assert card["kind"] == "NOTE" and card["priority"] == 5 and card["isAllDay"] is True
    assert f"记忆编号：#{long}" in card["content"] and "repeatFlag" not in card
    assert card["reminders"] == ["TRIGGER:-P6DT15H0M0S"] and "长期记忆" in card["tags"]
    assert (await kit.round()).pushed == 0  # nothing changed: nothing sent
    assert len(kit.fake.cards("alice")) == 2


async def test_bot_changes_reach_the_board(kit: Kit) -> None:
    await linked(kit)
    handle = await kit.save("喜欢喝冰美式", Tier.SHORT, importance=30)
    await kit.round()
    card = kit.fake.card("alice", "冰美式")
    assert kit.fake.column_name("alice", card) == "短期记忆" and card["reminders"] == ["TRIGGER:P0DT9H0M0S"]
    now = kit.rig.clock()
    await kit.rig.engine.move(Scope(ALICE), handle, Tier.MEDIUM, now)
    await kit.round()
    card = kit.fake.card("alice", "冰美式")
    assert kit.fake.column_name("alice", card) == "中期记忆" and card["reminders"] == ["TRIGGER:-P0DT15H0M0S"]
    await kit.rig.engine.edit(Scope(ALICE), handle, "喜欢喝热美式", now)
    await kit.round()
    assert kit.fake.card("alice", "热美式")["title"] == "喜欢喝热美式"
    await kit.rig.engine.archive(Scope(ALICE), handle, now)
    await kit.round()
    assert kit.fake.cards("alice") == []
    await kit.rig.engine.restore(Scope(ALICE), handle, now)
    await kit.round()
    assert len(kit.fake.cards("alice")) == 1
    await kit.rig.chat.forget(Scope(ALICE), [handle])
    await kit.round()
    assert kit.fake.cards("alice") == []
    task = next(t for t in kit.fake.accounts["alice"].tasks.values() if t.get("deleted"))
    assert "热美式" in task["title"]  # deleted, not merely completed


async def test_user_actions_in_the_app_reach_the_memories(kit: Kit) -> None:
    moved = await kit.save("养了一只叫团子的猫", Tier.LONG)
    done = await kit.save("下周二要体检", Tier.MEDIUM)
    gone = await kit.save("最近在追一部韩剧", Tier.SHORT)
    edited = await kit.save("在学吉他", Tier.MEDIUM)
    await linked(kit)
    scope, fake = Scope(ALICE), kit.fake
    before = await kit.rig.engine.get(scope, moved)
    kit.rig.clock.advance(days=1)
    fake.user_move("alice", fake.card("alice", "团子")["id"], "中期记忆")
    fake.user_complete("alice", fake.card("alice", "体检")["id"])
    fake.user_delete("alice", fake.card("alice", "韩剧")["id"])
    fake.user_edit("alice", fake.card("alice", "吉他")["id"], title="在学尤克里里", priority=5)
    new_id = fake.user_create("alice", "短期记忆", "周末想去爬山")
    await kit.round()
    after = await kit.rig.engine.get(scope, moved)
    assert after.tier is Tier.MEDIUM and after.review_at != before.review_at
    assert (await kit.rig.engine.get(scope, done)).status is Status.ARCHIVED
    assert (await kit.rig.engine.get(scope, gone)).status is Status.ACTIVE  # absent once: not yet deleted
    changed = await kit.rig.engine.get(scope, edited)
    assert changed.event == "在学尤克里里" and changed.importance == 85.0 and "吉他" not in changed.keywords
    # A card made in the app: "周末" is stored as the weekend it names, as a saved "周末" would be.
    hiking = [m for m in await kit.rig.engine.memories(scope) if m.event.endswith("想去爬山")]
    assert len(hiking) == 1 and hiking[0].origin is Origin.DIDA and hiking[0].tier is Tier.SHORT
    assert hiking[0].happens is not None and "周末" not in hiking[0].event
    assert f"记忆编号：#{hiking[0].id}" in fake.accounts["alice"].tasks[new_id]["content"]
    await kit.round()  # absent on a second poll, but only just: not yet deleted
    assert (await kit.rig.engine.get(scope, gone)).status is Status.ACTIVE
    kit.rig.clock.advance(minutes=11)
    await kit.round()
    assert (await kit.rig.engine.get(scope, gone)).status is Status.FORGOTTEN
    assert (await kit.rig.engine.get(scope, gone)).event == ""
    assert len(fake.cards("alice")) == 3  # the cat, the ukulele, the hike; no echo made a duplicate
    assert (await kit.round()).pulled == 0


async def test_an_outage_loses_nothing_and_makes_no_duplicate(kit: Kit) -> None:
    await linked(kit)
    first = await kit.save("对花生过敏", Tier.LONG)
    await kit.round()
    kit.fake.down = True
    for text in ("女朋友叫小雨", "在上海工作", "每天跑步五公里"):
        await kit.save(text, Tier.MEDIUM)
    await kit.rig.engine.edit(Scope(ALICE), first, "对花生和芒果过敏", kit.rig.clock())
    for _ in range(3):
        failed = await kit.round()
        assert failed.pushed == 0
        link = await kit.sync.load(ALICE)
        assert link is not None and link.failures > 0 and link.retry_at is not None and "503" in link.last_error
    kit.fake.down = False
    await kit.round()
    titles = sorted(t["title"] for t in kit.fake.cards("alice"))
    assert titles == sorted(["对花生和芒果过敏", "女朋友叫小雨", "在上海工作", "每天跑步五公里"])


async def test_a_lost_create_answer_is_adopted_not_repeated(kit: Kit) -> None:
    await linked(kit)
    handle = await kit.save("住在杭州", Tier.MEDIUM)
    await kit.round()
    # As if the create's answer never came back: the row says "sent, not confirmed".
    await kit.rig.store.put_dida_cards(ALICE, {handle: CardState(creating=True).encode()})
    await kit.round()
    assert len(kit.fake.cards("alice")) == 1
    state = CardState.decode((await kit.rig.store.dida_cards(ALICE))[handle])
    assert state.task_id == kit.fake.card("alice", "杭州")["id"] and not state.creating


async def test_rate_limit_pauses_the_queue_then_it_drains(kit: Kit) -> None:
    await linked(kit)
    for n in range(8):
        await kit.save(f"第{n}件要记住的事情", Tier.SHORT)
    kit.fake.per_minute = 5
    kit.fake.new_window()
    done = await kit.round()
    assert done.skipped == "rate limited"
    link = await kit.sync.load(ALICE)
    assert link is not None and link.rate_until is not None and "exceed_query_limit" in link.last_error
    assert (await kit.round()).skipped == "rate limited"  # inside the pause: no request at all
    kit.fake.per_minute = 100
    kit.fake.new_window()
    kit.rig.clock.advance(seconds=61)
    await kit.round()
    assert len(kit.fake.cards("alice")) == 8


async def test_a_revoked_token_breaks_the_link_once_and_loses_nothing(kit: Kit) -> None:
    await linked(kit)
    kit.fake.revoke("alice")
    await kit.save("明天面试", Tier.MEDIUM)
    assert (await kit.round()).notices == ["broken"]
    assert (await kit.round()).skipped == "broken"
    link = await kit.sync.load(ALICE)
    assert link is not None and link.state is LinkState.BROKEN
    await linked(kit)  # relinking adopts the same project and sends what waited
    assert [t["title"] for t in kit.fake.cards("alice")] == ["明天面试"]


async def test_a_deleted_project_pauses_and_never_forgets(kit: Kit) -> None:
    await kit.save("喜欢猫", Tier.LONG)
    await linked(kit)
    kit.fake.delete_project("alice")
    first = await kit.round()
    assert first.notices == ["project"]
    assert (await kit.round()).skipped == "paused"
    assert [m.event for m in await kit.rig.engine.memories(Scope(ALICE))] == ["喜欢猫"]
    await kit.round(rebuild=True)
    assert [t["title"] for t in kit.fake.cards("alice")] == ["喜欢猫"]


async def test_a_server_that_ignores_columns_keeps_the_tier_in_tags(kit: Kit) -> None:
    kit.fake.ignore_column_id = True
    long = await kit.save("每周一不要打扰我", Tier.LONG)
    done = await linked(kit)
    assert "columns" in done.notices
    card = kit.fake.card("alice", "每周一")
    assert kit.fake.column_name("alice", card) == "短期记忆" and "长期记忆" in card["tags"]
    await kit.round()
    assert (await kit.rig.engine.get(Scope(ALICE), long)).tier is Tier.LONG  # no false move
    kit.fake.user_edit("alice", card["id"], tags=["中期记忆", "周一"])
    await kit.round()
    assert (await kit.rig.engine.get(Scope(ALICE), long)).tier is Tier.MEDIUM  # the tag moved it
    assert "中期记忆" in kit.fake.card("alice", "每周一")["tags"]


async def test_expiry_is_warned_a_week_ahead_once(kit: Kit) -> None:
    await linked(kit)
    kit.rig.clock.advance(days=175)
    assert "expiry" in (await kit.round()).notices
    assert "expiry" not in (await kit.round()).notices


SECRETS = ("养了一只仓鼠", "对青霉素过敏", "在备考法考", "住在成都", "喜欢爬山", "周三晚上上夜班", "怕打雷",
           "女儿叫朵朵", "弹钢琴十年了")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(SECRETS), min_size=1, max_size=3, unique=True), min_size=2, max_size=4))
async def test_each_users_cards_reach_only_their_own_account(kit: Kit, told: list[list[str]]) -> None:
    base = ALICE + 100 * len(kit.fake.accounts)  # fresh users and accounts in every example
    people = {base + n: f"acct{base + n}" for n in range(len(told))}
    for (user, account), texts in zip(people.items(), told, strict=True):
        for text in texts:
            await kit.save(text, Tier.MEDIUM, user=user)
        await linked(kit, user, account)
    kit.rig.clock.advance(minutes=11)
    for user in people:
        await kit.round(user)
    for (user, account), texts in zip(people.items(), told, strict=True):
        tasks = kit.fake.accounts[account].tasks.values()
        assert sorted(t["title"] for t in tasks) == sorted(texts)
        handles = {m.id for m in await kit.rig.engine.memories(Scope(user))}
        assert {int(t["content"].split("记忆编号：#")[1].split("（")[0]) for t in tasks} == handles


async def test_a_card_retelling_a_memory_on_the_board_is_saved_once(kit: Kit) -> None:
    handle = await kit.save("养了一只叫团子的猫", Tier.LONG)
    await linked(kit)
    kit.fake.user_create("alice", "长期记忆", "养了一只叫团子的猫")
    for _ in range(3):
        kit.rig.clock.advance(minutes=11)
        await kit.round()
    mine = [m for m in await kit.rig.engine.memories(Scope(ALICE))]
    assert [m.id for m in mine] == [handle] and len(kit.fake.cards("alice")) == 2


async def test_a_change_the_journal_no_longer_holds_arrives_with_the_daily_compare(kit: Kit) -> None:
    await linked(kit)
    await kit.save("在学游泳", Tier.MEDIUM)
    link = await kit.sync.load(ALICE)
    assert link is not None
    link.cursor = await kit.rig.store.change_counter(Scope(ALICE))  # as if pruned while the bot was stopped
    await kit.rig.store.put_dida_link(ALICE, link.encode())
    await kit.round()
    kit.rig.clock.advance(days=1)
    await kit.round()
    assert [t["title"] for t in kit.fake.cards("alice")] == ["在学游泳"]


async def test_a_list_emptied_at_once_forgets_nothing_until_the_user_confirms(kit: Kit) -> None:
    """Found by the adversarial run: an emptied task list forgot every memory after two polls. Now more than a
    quarter of the cards gone at once holds their memories, tells the user once, and only ``/dida_sync 删除``
    forgets them; a few cards deleted by hand are still forgotten as before."""
    handles = [await kit.save(f"第{i}件要记住的事：{word}", Tier.MEDIUM)
               for i, word in enumerate(["猫", "吉他", "体检", "雅思", "搬家", "咖啡", "跑步", "韩剧"])]
    await linked(kit)
    scope, fake = Scope(ALICE), kit.fake
    for word in ["猫", "吉他", "体检", "雅思"]:  # half the board, in one go
        fake.user_delete("alice", fake.card("alice", word)["id"])
    notices = []
    for _ in range(3):
        kit.rig.clock.advance(minutes=11)
        notices += (await kit.round()).notices
    assert notices.count("bulk") == 1
    assert [(await kit.rig.engine.get(scope, h)).status for h in handles] == [Status.ACTIVE] * 8
    link = await kit.sync.load(ALICE)
    assert link is not None and len(link.held) == 4
    done = await kit.round(confirm=True)
    assert done.pulled == 4
    statuses = [(await kit.rig.engine.get(scope, h)).status for h in handles]
    assert statuses == [Status.FORGOTTEN] * 4 + [Status.ACTIVE] * 4
    # One more card deleted by hand after that: weighed on its own, forgotten after two polls and ten minutes.
    fake.user_delete("alice", fake.card("alice", "咖啡")["id"])
    await kit.round()
    kit.rig.clock.advance(minutes=11)
    assert "bulk" not in (await kit.round()).notices
    assert (await kit.rig.engine.get(scope, handles[5])).status is Status.FORGOTTEN


@pytest.mark.parametrize(("gone", "linked_cards", "held"), [
    (2, 4, False),   # fewer than three: a user's own deletes
    (3, 12, False),  # a quarter exactly: not more than a quarter
    (3, 11, True),
    (8, 8, True),    # the whole list
])
def test_the_bulk_rule(gone: int, linked_cards: int, held: bool) -> None:
    link = Link(ALICE, "", utcnow(), utcnow())
    assert (Puller._bulk(link, {f"t{i}" for i in range(gone)}, linked_cards) == "held") is held


async def test_a_memory_forgotten_while_the_link_is_broken_loses_its_card_on_relink(kit: Kit) -> None:
    await kit.save("喜欢猫", Tier.LONG)
    secret = await kit.save("在准备跳槽", Tier.MEDIUM)
    await linked(kit)
    assert sorted(t["title"] for t in kit.fake.cards("alice")) == ["喜欢猫", "在准备跳槽"]
    kit.fake.revoke("alice")
    assert (await kit.round()).notices == ["broken"]
    assert await kit.rig.chat.forget(Scope(ALICE), [secret]) == 1
    assert (await kit.round()).skipped == "broken"
    await linked(kit)  # the same account and project: the forgotten memory's card goes
    assert [t["title"] for t in kit.fake.cards("alice")] == ["喜欢猫"]


async def test_a_card_is_capped_like_any_memory(kit: Kit) -> None:
    await linked(kit)
    kit.fake.user_create("alice", "中期记忆", "很长的卡片" * 2000)
    kit.rig.clock.advance(minutes=1)
    await kit.round()
    [memory] = await kit.rig.engine.memories(Scope(ALICE))
    assert len(memory.event) == MAX_MEMORY_CHARS


FACTS = ["喜欢猫", "养了一条金鱼", "在学吉他", "住在杭州", "爱吃火锅", "对花生过敏", "周末常去爬山", "在读研究生",
         "每天早上跑步", "不喝咖啡"]


@pytest.fixture
async def small(tmp_path: Path) -> AsyncIterator[Kit]:
    """A scope that holds 10 memories (``MEMORY_CAPACITY=10``, the least allowed); the sync reads the journal."""
    async with FakeLLM() as llm, FakeDida() as fake:
        rig = await open_rig(llm, make_settings(tmp_path, memory_capacity=len(FACTS)))
        client = DidaClient(fake.base_url, fake.base_url)
        config = DidaConfig(CLIENT_ID, CLIENT_SECRET, "http://127.0.0.1/cb", rig.settings.tz)
        port = rig.engine.kanban
        sync = KanbanSync(client, port, rig.engine, port, TokenBox(Fernet.generate_key().decode()), config,
                          rig.chat.forget)
        try:
            yield Kit(fake, sync, rig)
        finally:
            await client.close()
            await close_rig(rig)


async def test_new_cards_count_toward_the_capacity_and_wait_for_room(small: Kit) -> None:
    """Long-term memories are never evicted; a card past the capacity is not imported (it used to be: 300 cards
    made 300 memories) but waits on the board, the user told once, until there is room."""
    scope = Scope(ALICE)
    for fact in FACTS[:-2]:
        await small.save(fact, Tier.LONG)
    await linked(small)
    for card in ("下周三去上海出差", "妈妈的生日是五月三号", "想换一台新电脑", "最近在减肥"):
        small.fake.user_create("alice", "长期记忆", card)
    small.rig.clock.advance(minutes=1)
    assert (await small.round()).notices == ["full"]
    assert len(await small.rig.engine.memories(scope)) == len(FACTS)
    small.rig.clock.advance(minutes=11)
    assert (await small.round()).notices == [], "told once"
    assert len(await small.rig.engine.memories(scope)) == len(FACTS)
    for memory in (await small.rig.engine.memories(scope))[:2]:
        await small.rig.engine.archive(scope, memory.id, small.rig.clock())
    small.rig.clock.advance(minutes=11)
    await small.round()
    events = [m.event for m in await small.rig.engine.memories(scope)]
    assert len(events) == len(FACTS)
    assert sum(any(card in e for e in events) for card in ("上海出差", "妈妈的生日", "新电脑", "减肥")) == 4
