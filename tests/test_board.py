"""The memory board's server (handlers/board.py, companion/chat/board_cards.py) on a real engine and SQLite file,
its receipts sent through aiogram's client to the fake Telegram: who may read and change what (signed init
data only, their own scopes only), what each change does to the memories, and what the board shows."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiogram import Bot

from companion.chat import texts
from companion.chat.group import Rooms
from companion.core.models import MemoryDraft, MemoryType, Scope, Status, Tier, Validity, When
from handlers import build_client
from handlers.board import NO_BOARD, Board, Budget, notifier
from tests.fakes import FakeLLM, FakeTelegram
from tests.groupkit import BOT, group_bot
from tests.miniapp import signed_init_data
from tests.pgtest import pg_schema
from tests.servers import free_port
from tests.support import Rig, close_rig, make_settings, open_rig

ALICE, BOB, GROUP = 7101, 7102, -100777
WEBAPP = "https://board.example/board"
BUDGET = 250  # requests a user a minute here (120 in production): room for the fuzz, a flood still finds it


@dataclass
class Client:
    """A Mini App's requests as Telegram's web view sends them, signed for a user."""

    tg: FakeTelegram
    base: str
    http: aiohttp.ClientSession

    def auth(self, user: int, **kw: Any) -> dict[str, str]:
        return {"Authorization": "tma " + signed_init_data(self.tg.token, user, **kw)}

    async def read(self, user: int, scope: str = "private", **params: str) -> tuple[int, dict[str, Any]]:
        async with self.http.get(f"{self.base}/api/board", params={"scope": scope, **params},
                                 headers=self.auth(user)) as response:
            return response.status, await response.json()

    async def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        async with self.http.post(f"{self.base}/api/{path}", json=body, headers=headers) as response:
            return response.status, await response.json()



@dataclass
class Site(Client):
    """The board on the rig's engine and clock: init data is signed at the rig's "now"."""

    rig: Rig

    def auth(self, user: int, **kw: Any) -> dict[str, str]:
        kw.setdefault("auth_date", self.rig.clock().timestamp())
        return super().auth(user, **kw)

    async def save(self, scope: Scope, text: str, tier: Tier = Tier.MEDIUM, importance: float = 60.0,
                   happens: When | None = None) -> int:
        draft = MemoryDraft(event=text, keywords=[], importance=importance, tier=tier, type=MemoryType.FACT,
                            validity=Validity.PERMANENT if tier is Tier.LONG else Validity.DAYS_30, happens=happens)
        return (await self.rig.engine.save(scope, draft, self.rig.clock())).memory.id


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with FakeTelegram() as tg, FakeLLM() as llm, aiohttp.ClientSession() as http:
        rig = await open_rig(llm, make_settings(tmp_path, webapp_url=WEBAPP))
        bot: Bot = build_client(tg.token, tg.base_url)
        board = Board(rig.settings, tg.token, rig.chat, Rooms(), notifier(bot), clock=rig.clock,
                      budget=Budget(limit=BUDGET))
        port = free_port()
        runner = await board.listen("127.0.0.1", port)
        try:
            yield Site(tg, f"http://127.0.0.1:{port}/board", http, rig)
        finally:
            await runner.cleanup()
            await bot.session.close()
            await close_rig(rig)


async def test_the_board_shows_a_users_memories_by_tier(site: Site) -> None:
    cat = await site.save(Scope(ALICE), "养了一只叫团子的猫", Tier.LONG, 90)
    day = (site.rig.clock() + timedelta(days=9)).date()
    trip = await site.save(Scope(ALICE), "去杭州出差", Tier.SHORT, 40, When(day))
    put_away = await site.save(Scope(ALICE), "以前住在上海", Tier.MEDIUM)
    await site.rig.engine.archive(Scope(ALICE), put_away, site.rig.clock())
    await site.save(Scope(BOB), "鲍勃的秘密")
    status, found = await site.read(ALICE)
    assert status == 200
    assert [(c["key"], c["count"]) for c in found["columns"]] == [("short", 1), ("medium", 0), ("long", 1),
                                                                 ("archived", 1)]
    by_id = {c["id"]: c for c in found["cards"]}
    assert set(by_id) == {cat, trip, put_away}, "another user's memory never shows"
    assert by_id[cat]["column"] == "long" and by_id[cat]["strength"] > by_id[trip]["strength"]
    assert by_id[trip]["text"].startswith(f"{day.month}月{day.day}"), "its date is shown with the words"
    assert by_id[put_away]["column"] == "archived" and by_id[cat]["source"]
    assert found["scopes"] == [{"key": "private", "name": "私聊"}]
    # Polling: nothing changed, nothing sent; a change anywhere moves the version.
    assert (await site.read(ALICE, since=str(found["version"])))[1] == {"unchanged": True}
    await site.rig.engine.pin(Scope(ALICE), trip, True, site.rig.clock())
    assert "cards" in (await site.read(ALICE, since=str(found["version"])))[1]
    searched = (await site.read(ALICE, q="猫"))[1]
    assert [c["id"] for c in searched["cards"]] == [cat]


async def test_each_change_goes_through_the_engine_with_its_receipt(site: Site) -> None:
    scope = Scope(ALICE)
    cat = await site.save(scope, "养了一只叫团子的猫", Tier.MEDIUM)
    job = await site.save(scope, "在准备跳槽", Tier.MEDIUM)
    me = site.auth(ALICE)
    assert (await site.post("change", {"id": cat, "action": "move", "value": "long"}, me))[0] == 200
    assert (await site.rig.engine.get(scope, cat)).tier is Tier.LONG
    await site.post("change", {"id": cat, "action": "pin", "value": True}, me)
    assert (await site.rig.engine.get(scope, cat)).pinned
    await site.post("change", {"id": cat, "action": "move", "value": "archived"}, me)
    assert (await site.rig.engine.get(scope, cat)).status is Status.ARCHIVED
    await site.post("change", {"id": cat, "action": "move", "value": "short"}, me)  # out of the archive
    back = await site.rig.engine.get(scope, cat)
    assert (back.status, back.tier) == (Status.ACTIVE, Tier.SHORT)
    assert (await site.post("change", {"id": cat, "action": "edit", "value": "养了两只猫"}, me))[0] == 200
    assert (await site.rig.engine.get(scope, cat)).event == "养了两只猫"
    assert (await site.post("forget", {"id": job}, me))[0] == 200
    gone = await site.rig.engine.get(scope, job)
    assert (gone.status, gone.event) == (Status.FORGOTTEN, "")
    said = [m["text"] for m in await site.tg.wait_for_messages(ALICE, 2)]
    assert said == ["已在记忆面板上改好：养了两只猫", texts.forgotten(1)]
    assert (await site.post("change", {"id": cat, "action": "edit", "value": "  "}, me))[0] == 400
    assert (await site.post("change", {"id": cat, "action": "move", "value": "nowhere"}, me))[0] == 400
    assert (await site.post("change", {"id": cat, "action": "explode"}, me))[0] == 400
    assert (await site.rig.engine.get(scope, cat)).event == "养了两只猫"


@pytest.mark.parametrize("how", ["unsigned", "forged", "expired", "another bot", "not tma"])
async def test_a_request_telegram_did_not_sign_now_is_refused_and_changes_nothing(site: Site, how: str) -> None:
    scope = Scope(ALICE)
    cat = await site.save(scope, "养了一只叫团子的猫")
    now = site.rig.clock().timestamp()
    valid = signed_init_data(site.tg.token, ALICE, auth_date=now)
    headers = {
        "unsigned": {},
        "forged": {"Authorization": "tma " + valid.replace("%22id%22%3A7101", "%22id%22%3A7102")},
        "expired": site.auth(ALICE, auth_date=now - 25 * 3600),
        "another bot": {"Authorization": "tma " + signed_init_data("123:another-bots-token", ALICE, auth_date=now)},
        "not tma": {"Authorization": "Bearer " + valid},
    }[how]
    for path, body in (("forget", {"id": cat}), ("change", {"id": cat, "action": "edit", "value": "改掉"})):
        status, _ = await site.post(path, body, headers)
        assert status == 401
    async with site.http.get(f"{site.base}/api/board", headers=headers) as response:
        assert response.status == 401
    memory = await site.rig.engine.get(scope, cat)
    assert (memory.status, memory.event) == (Status.ACTIVE, "养了一只叫团子的猫")
    assert site.tg.sent_messages(ALICE) == []


async def test_a_signed_user_reaches_only_their_own_scopes(site: Site) -> None:
    """Alice's valid init data, replayed to reach Bob's memory or a group's she has nothing in: 403."""
    bobs = await site.save(Scope(BOB), "鲍勃的秘密")
    mine_in_group = await site.save(Scope(ALICE, GROUP), "在群里说过要去爬山")
    bobs_in_group = await site.save(Scope(BOB, GROUP), "鲍勃在群里说的事")
    alice = site.auth(ALICE)
    assert (await site.post("forget", {"id": bobs}, alice))[0] == 403
    assert (await site.post("change", {"id": bobs, "action": "edit", "value": "被改了"}, alice))[0] == 403
    assert (await site.post("forget", {"id": bobs_in_group, "scope": str(GROUP)}, alice))[0] == 403
    assert (await site.post("forget", {"id": mine_in_group, "scope": "-100999"}, alice))[0] == 403
    assert (await site.read(ALICE, scope="-100999"))[0] == 403
    kept = ((bobs, Scope(BOB), "鲍勃的秘密"), (bobs_in_group, Scope(BOB, GROUP), "鲍勃在群里说的事"))
    for handle, scope, words in kept:
        memory = await site.rig.engine.get(scope, handle)
        assert (memory.status, memory.event) == (Status.ACTIVE, words)
    # Her own scope of the group: listed, readable, hers to change; Bob's lines there never show.
    status, found = await site.read(ALICE, scope=str(GROUP))
    assert status == 200 and [c["id"] for c in found["cards"]] == [mine_in_group]
    assert {"key": str(GROUP), "name": f"群 {GROUP}"} in found["scopes"]
    assert (await site.post("forget", {"id": mine_in_group, "scope": str(GROUP)}, alice))[0] == 200
    assert (await site.rig.engine.get(Scope(ALICE, GROUP), mine_in_group)).status is Status.FORGOTTEN


async def test_bad_bodies_are_400_and_a_flood_is_429(site: Site) -> None:
    me = site.auth(ALICE)
    async with site.http.post(f"{site.base}/api/forget", data=b"{not json", headers=me) as response:
        assert response.status == 400
    bodies: list[object] = [{}, {"id": "7"}, {"id": True}, [], {"id": 2**70}, {"id": -3}, {"id": 0}]
    for body in bodies:
        async with site.http.post(f"{site.base}/api/forget", json=body, headers=me) as response:
            assert response.status == 400
    for scope in ("0", "x", "99999999999999999999999999"):
        assert (await site.read(ALICE, scope=scope))[0] in (400, 403)
    statuses = [(await site.read(ALICE))[0] for _ in range(BUDGET + 5)]
    assert statuses.count(429) >= 5 and statuses[0] == 200, "the budget runs out"
    assert (await site.read(BOB))[0] == 200, "one user's flood does not cost another"


async def test_the_page_is_served_small(site: Site) -> None:
    async with site.http.get(site.base, allow_redirects=True) as response:
        page = await response.text()
        assert response.status == 200 and "记忆面板" in page and "board.js" in page
    for name in ("board.js", "board.css"):
        async with site.http.get(f"{site.base}/{name}") as response:
            assert response.status == 200 and len(await response.read()) < 30_000


async def test_board_opens_from_private_from_a_group_and_from_memories(tmp_path: Path) -> None:
    async with group_bot(tmp_path, webapp_url="https://board.example/board") as g:
        await g.seed(Scope(ALICE), "养了一只叫团子的猫", ["猫"])
        await g.private(ALICE, "/board")
        [opened] = g.tg.sent_messages(ALICE)
        assert web_apps(opened) == ["https://board.example/board"]
        # From a group: Telegram opens Mini Apps from private chats only; a link there names the group.
        await g.group(ALICE, GROUP, f"/board@{BOT}")
        [hint] = g.tg.sent_messages(GROUP)
        [[link]] = hint["reply_markup"]["inline_keyboard"]
        assert link["url"] == f"https://t.me/{BOT}?start=board_{GROUP}"
        await g.private(ALICE, f"/start board_{GROUP}")
        assert web_apps(g.tg.sent_messages(ALICE)[-1]) == [f"https://board.example/board?scope={GROUP}"]
        await g.private(ALICE, "/memories")
        listed = g.tg.sent_messages(ALICE)[-1]
        assert web_apps(listed) == ["https://board.example/board"] and "团子" in listed["text"]


async def test_without_webapp_url_there_is_no_board(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        assert "board" not in [c["command"] for c in g.tg.commands_for({"type": "all_private_chats"}) or []]
        await g.private(ALICE, "/memories")
        assert web_apps(g.tg.sent_messages(ALICE)[-1]) == []
        await g.private(ALICE, "/board")
        assert g.tg.sent_messages(ALICE)[-1]["text"] == NO_BOARD


def web_apps(message: dict[str, Any]) -> list[str]:
    markup = message.get("reply_markup") or {}
    return [b["web_app"]["url"] for row in markup.get("inline_keyboard", []) for b in row if "web_app" in b]


@pytest.mark.postgresql
async def test_the_board_on_postgresql(tmp_path: Path) -> None:
    """The board is the engine's: on a server database (several workers' store) it reads and changes the same."""
    async with pg_schema() as url, group_bot(tmp_path, database_url=url, webapp_url=WEBAPP) as g, \
            aiohttp.ClientSession() as http:
        cat = await g.seed(Scope(ALICE), "养了一只叫团子的猫", ["猫"])
        job = await g.seed(Scope(ALICE), "在准备跳槽", ["跳槽"])
        await g.seed(Scope(BOB), "鲍勃的秘密", ["秘密"])
        board = Board(g.settings, g.tg.token, g.chat, Rooms(), notifier(g.bot))
        port = free_port()
        runner = await board.listen("127.0.0.1", port)
        try:
            site = Client(g.tg, f"http://127.0.0.1:{port}/board", http)
            status, found = await site.read(ALICE)
            assert status == 200 and sorted(c["id"] for c in found["cards"]) == sorted([cat, job])
            me = site.auth(ALICE)
            assert (await site.post("change", {"id": cat, "action": "move", "value": "long"}, me))[0] == 200
            assert (await site.post("forget", {"id": job}, me))[0] == 200
            assert (await site.post("forget", {"id": cat}, site.auth(BOB)))[0] == 403
        finally:
            await runner.cleanup()
        assert (await g.engine.get(Scope(ALICE), cat)).tier is Tier.LONG
        assert (await g.engine.get(Scope(ALICE), job)).status is Status.FORGOTTEN


async def test_a_follow_up_is_marked_and_quieted_from_the_board(site: Site) -> None:
    """An event that ended and was not talked about since is what the companion will ask about (待问候);
    "别再提" on its card stops that, as the chat's button does."""
    today = site.rig.clock().astimezone(site.rig.settings.tz).date()
    trip = await site.save(Scope(ALICE), "去杭州出差", Tier.SHORT, 70,
                           When(today - timedelta(days=3), today - timedelta(days=1)))
    found = {c["id"]: c for c in (await site.read(ALICE))[1]["cards"]}
    assert found[trip]["followup"]
    assert (await site.post("change", {"id": trip, "action": "quiet"}, site.auth(ALICE)))[0] == 200
    assert not {c["id"]: c for c in (await site.read(ALICE))[1]["cards"]}[trip]["followup"]
    assert (await site.rig.engine.followups.threads(Scope(ALICE)))[0].stopped


def test_the_budget_is_per_user_sliding_and_forgets_quiet_users() -> None:
    now = [0.0]
    budget = Budget(limit=3, window=10.0, clock=lambda: now[0])
    assert [budget.take(1) for _ in range(4)] == [True, True, True, False]
    assert budget.take(2)
    now[0] = 10.5
    assert budget.take(1), "the window slid past the first three"
    for n in range(600):  # many users once each, a tenth of a second apart: those quiet for 10 s are swept
        now[0] = 100.0 + n / 10
        budget.take(1000 + n)
    assert 0 < budget.tracked < 300


async def test_any_body_or_query_is_answered_without_a_crash_and_touches_nobody_else(site: Site) -> None:
    """Bad input gets a clear refusal, never a 500 and never a change outside the caller's own memories."""
    mine = await site.save(Scope(ALICE), "养了一只叫团子的猫")
    bobs = await site.save(Scope(BOB), "鲍勃的秘密")
    rng = random.Random(5)
    values: list[Any] = [None, True, 0, -1, 2**64, 3.5, "", " ", "long", "archived", "x" * 5000, "\x00", "\ud800",
                         [], {}, {"a": 1}, [mine], str(mine), mine, bobs, "private", str(GROUP), "NaN"]
    me = site.auth(ALICE)
    for _ in range(150):
        body = {key: rng.choice(values) for key in rng.sample(["id", "action", "value", "scope", "extra"],
                                                                  rng.randint(0, 5))}
        if rng.random() < 0.5:
            body["action"] = rng.choice(["move", "edit", "pin", "quiet", "restore", "explode", None])
        path = rng.choice(["change", "forget"])
        status, _ = await site.post(path, body, me)
        assert status in (200, 400, 403, 404), (path, body, status)
    for query in ({"q": "\x00" * 50}, {"scope": "\ud800"}, {"since": "-1"}, {"q": "猫" * 500}, {"scope": "[]"}):
        async with site.http.get(f"{site.base}/api/board", params=query, headers=me) as response:
            assert response.status in (200, 400, 403), query
    bob = await site.rig.engine.get(Scope(BOB), bobs)
    assert (bob.status, bob.event) == (Status.ACTIVE, "鲍勃的秘密")


@pytest.mark.parametrize("words", ["\ud800坏", "有\x00空字符", "x" * 5000])
async def test_an_edit_with_words_no_one_types_is_stored_as_text_enters(site: Site, words: str) -> None:
    cat = await site.save(Scope(ALICE), "养了一只叫团子的猫")
    status, _ = await site.post("change", {"id": cat, "action": "edit", "value": words}, site.auth(ALICE))
    assert status == 200
    stored = (await site.rig.engine.get(Scope(ALICE), cat)).event
    assert "\x00" not in stored and "\ud800" not in stored and len(stored) <= 200
