"""Follow-ups written first (push), through the engine's threads and the chat layer's round, on a real SQLite
file and the real LLM client against the fake server: who gets one and when, recorded before it is sent,
the answer read with it, and every way to stop it."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from companion.chat import views
from companion.chat.followup_round import FollowUpRound
from companion.chat.pipeline import ChatService
from companion.chat.texts import FOLLOWUP_HOW_TO_STOP
from companion.chat.types import ChatConfig
from companion.core.models import MemoryDraft, Scope, Status, StatusReason, Validity, When
from companion.engine.admin_port import AdminPort
from companion.hosts.console import run_console
from companion.ops.admin.admin_service import AdminService
from companion.ops.admin.admin_texts import admin_stats
from tests.scripted import ScriptedBrain
from tests.support import Clock, Rig

TZ = ZoneInfo("Asia/Shanghai")
ME = Scope(880)
ASKED = "杭州那边的事都顺利吗？"
WRITE_FIRST = "主动发一条消息关心一下这件事"


def brain() -> ScriptedBrain:
    """Replies as usual; a follow-up call (its last message asks the companion to write first) gets ASKED."""
    def chat(body: dict[str, Any]) -> str:
        last = body["messages"][-1]
        return ASKED if last["role"] == "system" and WRITE_FIRST in last["content"] else "嗯嗯，我在听呢。"
    return ScriptedBrain(chat=chat)


class Outbox:
    """The sender the round is handed: what would go to Telegram, and whether it is delivered."""

    def __init__(self) -> None:
        self.sent: list[tuple[Scope, int, str]] = []
        self.deliver = True

    async def __call__(self, scope: Scope, handle: int, text: str) -> bool:
        self.sent.append((scope, handle, text))
        return self.deliver


def followup_calls(rig: Rig) -> list[dict[str, Any]]:
    return [b for b in rig.llm.chat_requests()
            if b["messages"][-1]["role"] == "system" and WRITE_FIRST in b["messages"][-1]["content"]]


FIRST = Clock().now.astimezone(TZ).date()  # the rig's first local day


def at_local(rig: Rig, days: int, hour: int, minute: int = 0) -> datetime:
    """``days`` after the rig's first local day, at this local time; the rig's clock is moved there."""
    moment = datetime(FIRST.year, FIRST.month, FIRST.day, hour, minute, tzinfo=TZ) + timedelta(days=days)
    rig.clock.now = moment.astimezone(ZoneInfo("UTC"))
    return rig.clock.now


async def told_trip(rig: Rig, scope: Scope = ME, *, start: int = 0, end: int = 2,
                    words: str = "下周三去杭州出差三天") -> int:
    """A trip the user told about, ``start``-``end`` days from the rig's first local day."""
    trip = When(FIRST + timedelta(days=start), FIRST + timedelta(days=end))
    saved = await rig.engine.save_draft(scope, MemoryDraft(words, [words[1:3], words[3:]], 70,
                                                           Validity.DAYS_30, happens=trip), rig.clock())
    return saved.id


@pytest.fixture
async def trip(rig: Rig) -> int:
    brain().install(rig.llm)
    at_local(rig, 0, 9)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "下周三我要去杭州出差")
    return await told_trip(rig)


def round_of(rig: Rig) -> FollowUpRound:
    return FollowUpRound(rig.chat, (10, 21))


async def test_the_morning_after_the_trip_one_message_is_written_first(rig: Rig, trip: int) -> None:
    box, push = Outbox(), round_of(rig)
    assert await push(at_local(rig, 2, 12), box) == 0  # the trip's last day: not over yet
    assert await push(at_local(rig, 3, 9, 59), box) == 0  # before the hours
    assert await push(at_local(rig, 3, 10, 30), box) == 1
    [(scope, handle, text)] = box.sent
    assert (scope, handle) == (ME, trip)
    assert text == ASKED + FOLLOWUP_HOW_TO_STOP  # the first one says how to stop them
    [call] = followup_calls(rig)
    assert "下周三去杭州出差三天" in call["messages"][-1]["content"]
    assert any(m["role"] == "user" and "杭州" in m["content"] for m in call["messages"][1:-1]) is False  # days ago
    [thread] = await rig.engine.followups.threads(ME)
    assert thread.pushed_at == rig.clock() and not thread.answered
    # Once: not again that day, nor the next (the thread was written about).
    assert await push(at_local(rig, 3, 18), box) == 0
    assert await push(at_local(rig, 4, 11), box) == 0
    assert len(box.sent) == 1


async def test_the_answer_is_read_with_what_was_written_first(rig: Rig, trip: int) -> None:
    await round_of(rig)(at_local(rig, 3, 10, 30), Outbox())
    at_local(rig, 3, 10, 45)
    await rig.chat.reply(ME, "挺顺利的，谈成了")
    messages = rig.llm.chat_requests()[-1]["messages"]
    spoken = [m["content"] for m in messages if m["role"] == "assistant"]
    assert spoken[-1].startswith(ASKED)  # the model sees what it asked
    [thread] = await rig.engine.followups.threads(ME)
    assert thread.answered
    assert (await rig.engine.followups.counts()) == {"sent": 1, "answered": 1, "stopped": 0}
    # The trip is over and told about: done, put away (its Dida365 card completes), restorable.
    [done] = await rig.engine.memories(ME, {Status.ARCHIVED})
    assert done.id == trip and done.status_reason == StatusReason.DONE
    assert trip not in {m.id for m in await rig.engine.memories(ME)}


async def test_not_on_a_day_the_user_wrote(rig: Rig, trip: int) -> None:
    at_local(rig, 3, 8)
    await rig.chat.reply(ME, "早上好")
    assert await round_of(rig)(at_local(rig, 3, 10, 30), Outbox()) == 0
    assert await round_of(rig)(at_local(rig, 4, 10, 30), Outbox()) == 1


async def test_a_model_outage_records_nothing_and_the_next_round_writes(rig: Rig, trip: int) -> None:
    box = Outbox()
    rig.llm.fail_next(count=1, status=500)
    assert await round_of(rig)(at_local(rig, 3, 10, 30), box) == 0
    assert box.sent == [] and (await rig.engine.followups.threads(ME))[0].pushed_at is None
    assert await round_of(rig)(at_local(rig, 3, 11), box) == 1


async def test_recorded_before_it_is_sent_so_never_twice(rig: Rig, trip: int) -> None:
    box = Outbox()
    box.deliver = False  # the send failed after the record (or the process died in between)
    assert await round_of(rig)(at_local(rig, 3, 10, 30), box) == 0
    box.deliver = True
    assert await round_of(rig)(at_local(rig, 4, 10, 30), box) == 0
    assert len(box.sent) == 1


async def test_forgetting_closes_the_thread_at_once(rig: Rig, trip: int) -> None:
    await rig.chat.forget(ME, [trip])
    assert await rig.engine.followups.threads(ME) == []
    assert await round_of(rig)(at_local(rig, 3, 10, 30), Outbox()) == 0


async def test_forgetting_everything_closes_every_thread(rig: Rig, trip: int) -> None:
    await rig.engine.followups.catch_up(rig.clock())
    assert await rig.engine.followups.threads(ME) != []
    await rig.chat.forget(ME, None)
    assert await rig.engine.followups.threads(ME) == []


@pytest.mark.parametrize("how", ["followup off", "companion off", "never bring it up"])
async def test_every_way_to_stop_it(rig: Rig, trip: int, how: str) -> None:
    if how == "followup off":
        await rig.engine.followups.switch(ME, False)
    elif how == "companion off":
        await rig.chat.stop(ME)
    else:
        assert await rig.engine.followups.stop(ME, trip, rig.clock())
    assert await round_of(rig)(at_local(rig, 3, 10, 30), Outbox()) == 0
    if how == "followup off":
        await rig.engine.followups.switch(ME, True)
        assert await round_of(rig)(at_local(rig, 3, 11), Outbox()) == 1


async def test_never_bring_it_up_also_silences_the_cue_in_conversation(rig: Rig, trip: int) -> None:
    await rig.engine.followups.stop(ME, trip, rig.clock())
    at_local(rig, 3, 22)  # a new conversation: more than 12 hours since the last turn
    await rig.chat.reply(ME, "今天好累")
    assert "应该已经结束了" not in str(rig.llm.chat_requests()[-1]["messages"][-1]["content"])


async def test_after_two_unanswered_none_until_the_user_writes(rig: Rig) -> None:
    brain().install(rig.llm)
    at_local(rig, 0, 9)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "你好")
    for start, words in enumerate(["去杭州出差", "去苏州看展", "去上海面试"]):  # each over a day later
        await told_trip(rig, start=start, end=start, words=words)
    box, push = Outbox(), round_of(rig)
    assert await push(at_local(rig, 1, 10, 30), box) == 1
    assert await push(at_local(rig, 2, 10, 30), box) == 1
    assert await push(at_local(rig, 3, 10, 30), box) == 0  # two in a row unanswered
    at_local(rig, 3, 22)
    await rig.chat.reply(ME, "前两天太忙了")
    assert await push(at_local(rig, 4, 10, 30), box) == 1
    assert [text.endswith(FOLLOWUP_HOW_TO_STOP) for _, _, text in box.sent] == [True, False, False]


async def test_never_in_groups(rig: Rig) -> None:
    brain().install(rig.llm)
    at_local(rig, 0, 9)
    group = Scope(880, -100123)
    await rig.engine.set_active(group, True, rig.clock())
    await told_trip(rig, group)
    assert await round_of(rig)(at_local(rig, 3, 10, 30), Outbox()) == 0


async def test_a_birthday_gets_one_greeting_on_its_day_each_year(rig: Rig) -> None:
    brain().install(rig.llm)
    at_local(rig, 0, 9)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "你好")
    day = FIRST + timedelta(days=5)
    await rig.engine.save_draft(ME, MemoryDraft("我的生日", ["生日"], 80, Validity.PERMANENT,
                                                happens=When(day.replace(year=1995), yearly=True)), rig.clock())
    box, push = Outbox(), round_of(rig)
    assert await push(at_local(rig, 4, 12), box) == 0
    assert await push(at_local(rig, 5, 10, 5), box) == 1
    assert await push(at_local(rig, 6, 10, 5), box) == 0
    at_local(rig, 6, 11)
    await rig.chat.reply(ME, "谢谢你记得！")  # answered: a birthday comes back, it is never put away
    assert [m.event for m in await rig.engine.memories(ME) if m.happens is not None] == ["我的生日"]
    at_local(rig, 300, 9)
    await rig.chat.reply(ME, "好久不见")  # the user is back; a year later it is the day again
    assert await push(at_local(rig, 365 + 5, 10, 5), box) == 1


async def test_after_downtime_old_threads_are_not_sent_in_a_burst(rig: Rig, trip: int) -> None:
    # The bot was down for three weeks: the trip's window (14 days after it) is over.
    assert await round_of(rig)(at_local(rig, 20, 10, 30), Outbox()) == 0
    assert (await rig.engine.followups.threads(ME))[0].closed


async def test_the_operator_switch(rig: Rig, trip: int) -> None:
    off = FollowUpRound(rig.chat, (10, 21), enabled=False)
    assert await off(at_local(rig, 3, 10, 30), Outbox()) == 0


async def test_a_worker_holding_the_conversation_reads_what_another_process_wrote_first(rig: Rig, trip: int) -> None:
    # Another process (the leader, which runs the round) writes first; this one already holds the session.
    leader = ChatService(rig.engine, rig.client, ChatConfig.from_settings(rig.settings), clock=rig.clock)
    await FollowUpRound(leader, (10, 21))(at_local(rig, 3, 10, 30), Outbox())
    at_local(rig, 3, 10, 40)
    await rig.chat.reply(ME, "挺顺利的")
    spoken = [m["content"] for m in rig.llm.chat_requests()[-1]["messages"] if m["role"] == "assistant"]
    assert spoken and spoken[-1].startswith(ASKED)
    assert (await rig.engine.followups.threads(ME))[0].answered


async def test_memories_why_and_stats_show_what_was_followed_up(rig: Rig, trip: int) -> None:
    def line(text: str) -> str:
        return next(row for row in text.splitlines() if "杭州" in row)

    assert "待问候" not in line((await views.memory_page(rig.engine, ME, 0, "", False, at_local(rig, 1, 12))).text)
    assert line((await views.memory_page(rig.engine, ME, 0, "", False, at_local(rig, 3, 9))).text).endswith(
        "（待问候）")  # the trip is over: the companion will ask
    await round_of(rig)(at_local(rig, 3, 10, 30), Outbox())
    why, _ = await views.why_text(rig.engine, ME, "杭州", TZ, rig.clock())
    assert "我主动问候过：" in why and "你还没回复" in why, why
    assert "主动问候 1 次，你回复了 0 次" in await views.stats_text(rig.engine, ME, rig.clock())
    await rig.engine.followups.stop(ME, trip, rig.clock())
    assert "待问候" not in (await views.memory_page(rig.engine, ME, 0, "", False, rig.clock())).text
    assert "你说过别再提" in (await views.why_text(rig.engine, ME, "杭州", TZ, rig.clock()))[0]
    admin = await AdminService(rig.engine, AdminPort(rig.store, None), TZ, clock=rig.clock).stats()
    assert admin.followups == {"sent": 1, "answered": 0, "stopped": 1}
    assert "主动问候：发出 1 次，得到回复 0 次，被要求别再提 1 件" in admin_stats(admin)


async def test_the_console_shows_a_follow_up_due_when_it_starts(rig: Rig, trip: int) -> None:
    at_local(rig, 3, 10, 30)
    lines = iter(["挺顺利的"])

    async def read() -> str | None:
        return next(lines, None)

    out = io.StringIO()
    await run_console(rig.chat, ME, read, out, followup=round_of(rig))
    shown = out.getvalue()
    assert ASKED in shown and shown.index(ASKED) < shown.index("嗯嗯，我在听呢。"), shown
    assert (await rig.engine.followups.threads(ME))[0].answered


async def test_several_users_in_one_round_each_get_their_own(rig: Rig) -> None:
    brain().install(rig.llm)
    at_local(rig, 0, 9)
    users = [Scope(900 + n) for n in range(6)]  # more than are written to at once
    for n, scope in enumerate(users):
        await rig.chat.start(scope)
        await rig.chat.reply(scope, "你好")
        await told_trip(rig, scope, words=f"去杭州出差第{n}次")
    box = Outbox()
    assert await round_of(rig)(at_local(rig, 3, 10, 30), box) == len(users)
    assert sorted(scope.user_id for scope, _, _ in box.sent) == [scope.user_id for scope in users]
    for scope in users:  # each message went to its own user, about that user's own memory
        [thread] = await rig.engine.followups.threads(scope)
        assert thread.pushed_at is not None
        assert [(s, h) for s, h, _ in box.sent if s == scope] == [(scope, thread.handle)]
