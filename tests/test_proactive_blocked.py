"""A user who blocked the bot is found out by a proactive message too: a 403 on the review or the weekly
summary or a follow-up switches companion mode off for them (like a 403 on a reply), with one INFO line and no
traceback, so the next rounds write to them no more. Through the fake Telegram server."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from companion.chat.followup_round import FollowUpRound
from companion.core.models import MemoryDraft, Scope, Validity, When
from companion.core.setting import WEEKLY
from companion.ops.jobs import proactive as reviews
from handlers.delivery import switch_off_blocked
from handlers.reviews import followup_sender, proactive_senders
from tests.scripted import ScriptedBrain
from tests.support import USER, Live


@pytest.mark.parametrize("which", ["review", "weekly"])
async def test_a_403_on_a_proactive_message_switches_the_user_off(
    live: Live, caplog: pytest.LogCaptureFixture, which: str
) -> None:
    scope, now = Scope(USER), live.rig.clock()
    brain = ScriptedBrain()  # switching off queues what is left for memory; the profile is rebuilt from it
    brain.install(live.llm)
    await live.say("/start_aiGF", 1)
    await live.rig.engine.remember(scope, [MemoryDraft("在学吉他", ["吉他"], 60.0, validity=Validity.DAYS_7)], now)
    await live.rig.engine.set_setting(WEEKLY, scope, True)
    later = now + timedelta(days=7)

    async def blocked(scope: Scope) -> None:
        await switch_off_blocked(live.rig.chat, live.buffer, scope)

    async with live.bot() as bot:
        send_review, send_weekly = proactive_senders(bot, blocked)
        live.tg.fail_next("sendMessage", 1, status=403)
        with caplog.at_level(logging.INFO):
            if which == "review":
                sent = await reviews.review_round(live.rig.engine, later, live.rig.settings.tz, (0, 24), send_review)
            else:
                sent = await reviews.weekly_round(live.rig.engine, later, send_weekly)
            await asyncio.sleep(0.2)
            await live.rig.chat.drain()
        assert sent == 0
        assert brain.profile_calls == 1  # the empty profile is built from what was learned
        assert not live.rig.chat.is_active(scope)
        assert scope not in await live.rig.engine.active_scopes(), "the flag must survive a restart"
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        assert [r.getMessage() for r in caplog.records if scope.key in r.getMessage()] == [
            f"user {scope.key} blocked the bot; companion mode switched off"
        ]
        # The next rounds skip the user: nothing more is sent to them.
        calls = len(live.tg.calls)
        assert await reviews.review_round(live.rig.engine, later, live.rig.settings.tz, (0, 24), send_review) == 0
        assert await reviews.weekly_round(live.rig.engine, later, send_weekly) == 0
        assert [name for name, _ in live.tg.calls[calls:]] == []


async def test_a_403_on_a_follow_up_switches_the_user_off(live: Live) -> None:
    scope = Scope(USER)
    ScriptedBrain(chat=lambda body: "出差顺利吗？").install(live.llm)
    await live.say("/start_aiGF", 1)
    now = live.rig.clock()
    trip = When((now - timedelta(days=5)).date(), (now - timedelta(days=3)).date())
    await live.rig.engine.save_draft(scope, MemoryDraft("去杭州出差三天", ["杭州"], 70, Validity.DAYS_30,
                                                        happens=trip), now)
    live.rig.clock.advance(days=1)  # a day the user has not written on, within 10-21 local (the rig's 10:00)

    async def blocked(scope: Scope) -> None:
        await switch_off_blocked(live.rig.chat, live.buffer, scope)

    async with live.bot() as bot:
        push = FollowUpRound(live.rig.chat, (0, 24))
        live.tg.fail_next("sendMessage", 1, status=403)
        assert await push(live.rig.clock(), followup_sender(bot, blocked)) == 0
        await live.rig.chat.drain()
        assert not live.rig.chat.is_active(scope)
        assert scope not in await live.rig.engine.active_scopes()
        calls = len(live.tg.calls)
        live.rig.clock.advance(days=1)
        assert await push(live.rig.clock(), followup_sender(bot, blocked)) == 0
        assert [name for name, _ in live.tg.calls[calls:]] == []
