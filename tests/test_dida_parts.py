"""The Dida365 kanban's parts on their own: the card template and reminder triggers, the one-time OAuth states,
the token's encryption, the callback server, the service's answers and the background loop's choice of who
syncs, and the commands when the operator did not configure the integration."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import aiohttp
import pytest
from cryptography.fernet import Fernet

from companion.chat import command_table as commands
from companion.chat.command_table import Place
from companion.core.errors import DidaAuthError, DidaLinkError
from companion.core.models import Memory, MemoryType, Origin, Scope, Tier, Validity
from companion.kanban import card_texts as texts
from companion.kanban import cards
from companion.kanban.card_records import Link, LinkState, TokenBox
from companion.kanban.dida_api import DidaClient
from companion.kanban.oauth import CallbackServer, OAuthStates
from companion.kanban.service import KanbanService, KanbanWorker, LinkConfig
from companion.kanban.sync import DidaConfig, KanbanSync
from tests.fakes.dida import CLIENT_ID, CLIENT_SECRET, FakeDida
from tests.support import USER, Live, Rig, make_settings

NOW = datetime(2026, 3, 1, 4, 0, tzinfo=UTC)
TZ = ZoneInfo("Asia/Shanghai")


def memory(tier: Tier, importance: float = 60.0, **extra: object) -> Memory:
    return Memory(id=42, event="每周一不要打扰我", keywords=["周一", "打扰"], importance=importance, created_at=NOW,
                  validity=Validity.PERMANENT, last_mentioned_at=None, updated_at=NOW, expires_at=None,
                  type=MemoryType.INSTRUCTION, origin=Origin.EXPLICIT, mention_count=0, last_decay_at=NOW, tier=tier,
                  review_at=datetime(2026, 3, 8, 20, 0, tzinfo=UTC), **extra)  # type: ignore[arg-type]


def test_a_card_says_what_the_design_template_says() -> None:
    card = cards.card_of(memory(Tier.LONG), TZ)
    assert card.title == "每周一不要打扰我" and card.priority == 5
    assert "**类型**：约定" in card.content and "**内容**：每周一不要打扰我" in card.content
    assert "**关键词**：周一、打扰" in card.content and cards.handle_in(card.content) == 42
    assert cards.content_line(card.content) == "每周一不要打扰我"
    # The review is 20:00 UTC on the 8th: the 9th in Shanghai, as an all-day date at local midnight.
    assert card.due == "2026-03-09T00:00:00+0800"
    assert cards.title_of("很" * 60).endswith("…") and len(cards.title_of("很" * 60)) == cards.TITLE_CHARS


@pytest.mark.parametrize(("tier", "importance", "priority"), [
    (Tier.LONG, 10, 5), (Tier.MEDIUM, 10, 3), (Tier.SHORT, 85, 5), (Tier.SHORT, 55, 3), (Tier.SHORT, 30, 1),
    (Tier.SHORT, 5, 0),
])
def test_priority_follows_tier_and_importance(tier: Tier, importance: float, priority: int) -> None:
    assert cards.priority_of(memory(tier, importance)) == priority


def test_reminders_fire_before_the_review_as_the_tier_intends() -> None:
    # An all-day trigger counts from the due day's midnight: minus 15 hours is 09:00 the day before.
    assert cards.reminder(Tier.SHORT, 9) == "TRIGGER:P0DT9H0M0S"  # the review day, 09:00
    assert cards.reminder(Tier.MEDIUM, 9) == "TRIGGER:-P0DT15H0M0S"  # one day before, 09:00
    assert cards.reminder(Tier.LONG, 9) == "TRIGGER:-P6DT15H0M0S"  # seven days before, 09:00
    assert cards.reminder(Tier.MEDIUM, 10) == "TRIGGER:-P0DT14H0M0S"


def test_a_task_never_repeats_and_carries_its_tier_as_a_tag() -> None:
    m = memory(Tier.MEDIUM)
    body = cards.task_body(m.keywords, cards.card_of(m, TZ), "p1", "c2", TZ, hour=9, tier_tags=True)
    assert "repeatFlag" not in body and body["kind"] == "NOTE" and body["columnId"] == "c2"
    assert body["tags"] == ["中期记忆", "周一", "打扰"] and body["timeZone"] == "Asia/Shanghai"
    assert cards.tier_of_tags(body["tags"]) is Tier.MEDIUM
    plain = cards.task_body(m.keywords, cards.card_of(m, TZ), "p1", "c2", TZ, hour=9, tier_tags=False)
    assert plain["tags"] == ["周一", "打扰"]


def test_oauth_states_are_one_time_bound_and_expire() -> None:
    states = OAuthStates()
    first = states.issue(1, NOW)
    second = states.issue(1, NOW)  # a new link replaces the old one
    assert states.take(first, NOW) is None
    assert states.take(second, NOW + timedelta(minutes=11)) is None  # expired
    third = states.issue(1, NOW)
    assert states.take(third, NOW + timedelta(minutes=9)) == 1 and states.take(third, NOW) is None
    states.issue(2, NOW)
    assert not states.take_user(1, NOW) and states.take_user(2, NOW) and not states.take_user(2, NOW)


def test_tokens_are_sealed_and_a_wrong_key_does_not_open_them() -> None:
    box = TokenBox(Fernet.generate_key().decode())
    sealed = box.seal("secret-token")
    assert "secret-token" not in sealed and box.open(sealed) == "secret-token"
    with pytest.raises(DidaAuthError):
        TokenBox(Fernet.generate_key().decode()).open(sealed)
    with pytest.raises(DidaLinkError):
        TokenBox(None).seal("x")
    with pytest.raises(DidaLinkError):
        TokenBox("not a key")
    link = Link(7, sealed, NOW, NOW + timedelta(days=180), columns={"long": "c3"})
    assert Link.decode(link.encode()) == link and "secret-token" not in link.encode()


def test_the_integration_is_off_unless_the_app_is_configured(tmp_path: object) -> None:
    assert not make_settings(tmp_path).dida_enabled  # type: ignore[arg-type]
    on = make_settings(tmp_path, dida_client_id="a", dida_client_secret="b", dida_redirect_uri="https://x/cb")  # type: ignore[arg-type]
    assert on.dida_enabled and on.dida_api_base == "https://api.dida365.com"
    assert "dida_link" not in commands.menu(Place.PRIVATE) and "/dida_link" not in commands.help_lines(Place.PRIVATE)
    assert commands.row(Place.PRIVATE, "dida_link").feature == commands.DIDA  # registered even when not offered


async def test_the_commands_say_so_when_the_integration_is_off(live: Live) -> None:
    assert await live.say("/dida_link", 1) == texts.NOT_CONFIGURED


@pytest.fixture
async def service(rig: Rig) -> AsyncIterator[tuple[KanbanService, FakeDida]]:
    async with FakeDida() as fake:
        client = DidaClient(fake.base_url, fake.base_url)
        port = rig.engine.kanban
        sync = KanbanSync(client, port, rig.engine, port, TokenBox(Fernet.generate_key().decode()),
                          DidaConfig(CLIENT_ID, CLIENT_SECRET, "https://x/cb", TZ), rig.chat.forget)
        kanban = KanbanService(sync, LinkConfig(fake.base_url, CLIENT_ID, "https://x/cb", True, TZ), clock=rig.clock)
        try:
            yield kanban, fake
        finally:
            await client.close()


async def test_linking_by_callback_and_by_code(service: tuple[KanbanService, FakeDida], rig: Rig) -> None:
    kanban, fake = service
    told: list[tuple[int, str]] = []

    async def notify(user: int, text: str) -> None:
        told.append((user, text))

    kanban.notify = notify
    assert await kanban.code(USER, fake.grant_code("u")) == texts.CODE_NO_STATE  # no /dida_link first
    assert await kanban.status(USER) == texts.NOT_LINKED
    link = kanban.link_text(USER)
    state = link.split("state=")[1].split("&")[0]
    assert await kanban.finish_callback("forged", "code") == texts.CALLBACK_BAD
    assert await kanban.finish_callback(state, fake.grant_code("u")) == texts.CALLBACK_OK
    assert told and told[0][0] == USER and told[0][1].startswith("已连接滴答清单")
    kanban.link_text(USER)
    assert await kanban.code(USER, "no-such-code") == texts.CODE_REFUSED
    assert "正常" in await kanban.status(USER)
    assert await kanban.unlink(USER, "") == texts.UNLINK_ASK
    assert await kanban.unlink(USER, "keep") == texts.UNLINKED_KEEP
    assert await kanban.sync.load(USER) is None


async def test_the_callback_server_answers_a_page(service: tuple[KanbanService, FakeDida]) -> None:
    kanban, fake = service
    state = kanban.link_text(USER).split("state=")[1].split("&")[0]
    with socket.socket() as probe:  # a free port for the callback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = CallbackServer(port, "/dida/cb", kanban.finish_callback, host="127.0.0.1")
    await server.start()
    try:
        async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{port}/dida/cb", params={"state": state, "code": fake.grant_code("u")}
        ) as page:
            assert texts.CALLBACK_OK in await page.text()
    finally:
        await server.stop()
    assert await kanban.sync.load(USER) is not None


def _outward_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends nothing), None when it has only
    loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routed, never reached
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


async def test_the_callback_server_listens_on_loopback_unless_told(service: tuple[KanbanService, FakeDida]) -> None:
    """Found by the adversarial run: the OAuth callback listened on every address of the machine."""
    kanban, _fake = service
    outward = _outward_address()
    if outward is None:
        pytest.skip("this machine has no address but loopback")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = CallbackServer(port, "/dida/cb", kanban.finish_callback)
    await server.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        with pytest.raises(OSError), socket.create_connection((outward, port), timeout=2):
            pass
    finally:
        await server.stop()


async def test_the_loop_syncs_who_changed_or_is_due_and_leaves_the_waiting(
    service: tuple[KanbanService, FakeDida], rig: Rig
) -> None:
    kanban, fake = service
    worker = KanbanWorker(kanban, rig.engine.kanban, rig.engine.kanban, timedelta(minutes=10), clock=rig.clock)
    kanban.link_text(USER)
    await kanban.code(USER, fake.grant_code("u"))
    assert await worker.tick() == 1  # first pass: everyone
    assert await worker.tick() == 0  # nothing changed, poll not due
    await rig.engine.save_explicit(Scope(USER), "我喜欢猫", rig.clock())
    assert await worker.tick() == 1  # the journal moved: pushed at once
    assert any("猫" in t["title"] for t in fake.cards("u"))
    rig.clock.advance(minutes=11)
    assert await worker.tick() == 1  # the poll is due
    link = await kanban.sync.load(USER)
    assert link is not None
    rig.clock.advance(minutes=11)
    await rig.store.put_dida_link(USER, replace(link, rate_until=rig.clock() + timedelta(seconds=30)).encode())
    assert await worker.tick() == 0  # waiting out the rate limit
    await rig.store.put_dida_link(USER, replace(link, state=LinkState.BROKEN).encode())
    rig.clock.advance(minutes=11)
    assert await worker.tick() == 0  # broken: only a relink helps
    assert await kanban.sync_now(USER) == texts.SYNC_BROKEN


async def test_a_long_sync_answers_at_once_and_says_its_result_later(
    service: tuple[KanbanService, FakeDida], rig: Rig
) -> None:
    """/dida_sync is answered in the user's order: a round that takes long (hundreds of new cards) must not
    hold the user's next messages, so past a few seconds it goes on in the background and says its result."""
    kanban, fake = service
    told: list[str] = []

    async def notify(user_id: int, text: str) -> None:
        told.append(text)

    kanban.notify = notify
    kanban.link_text(USER)
    await kanban.code(USER, fake.grant_code("u"))
    fake.user_create("u", "中期记忆", "喜欢看展")
    rig.clock.advance(minutes=11)
    assert await kanban.sync_now(USER, wait=0) == texts.SYNC_LONG
    for _ in range(200):
        if told:
            break
        await asyncio.sleep(0.05)
    assert len(told) == 1 and told[0].startswith(texts.SYNCED[:4])
    assert [m.event for m in await rig.engine.memories(Scope(USER))] == ["喜欢看展"]
    assert (await kanban.sync_now(USER)).startswith(texts.SYNCED[:4]), "a quick one answers itself"
