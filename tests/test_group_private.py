"""What a group member asks about their own group memories goes to their private chat: /forget (and
"忘掉…" said to the bot), /why, reviews and the weekly summary. Buttons sent there act on the group scope
they name, only for their own user; without a private chat the group gets a hint, never memory text."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from companion.chat import group_texts as gt
from companion.chat import texts
from companion.core.models import MemoryDraft, Scope, Status, Validity
from companion.core.setting import WEEKLY
from companion.core.timeutil import utcnow
from companion.ops.jobs import proactive as reviews
from handlers.reviews import proactive_senders
from tests.fakes.telegram import JSONDict
from tests.groupkit import BOT, GroupBot, group_bot

A, B = 1001, 1002
G1 = -1001001


def texts_in(g: GroupBot, chat_id: int) -> list[str]:
    return [str(m["text"]) for m in g.tg.sent_messages(chat_id)]


async def press(g: GroupBot, user: int, chat_id: int, message: JSONDict, label: str) -> None:
    data = next(d for text, d in g.tg.buttons(message) if label in text)
    g.tg.push_callback(user, int(message["message_id"]), data, chat_id=chat_id)
    await g.deliver()


async def setup(g: GroupBot) -> None:
    g.tg.add_group(G1, "火锅群")
    await g.private(A, "/start")  # A opened a private chat with the bot; B never did
    for user in (A, B):
        await g.group(user, G1, f"/start_aiGF@{BOT}")
    await g.seed(Scope(A, G1), "喜欢火锅 甲一", ["火锅"])
    await g.seed(Scope(A, G1), "火锅要微辣 甲二", ["火锅"])
    await g.seed(Scope(A), "喜欢火锅 私一", ["火锅"])
    await g.seed(Scope(B, G1), "喜欢火锅 乙一", ["火锅"])


async def asked_privately(g: GroupBot, said: str) -> JSONDict:
    """A says ``said`` in the group: the group hears "我私信你了", A gets the answer naming the group."""
    await g.group(A, G1, said)
    assert texts_in(g, G1)[-1] == gt.SENT_PRIVATELY
    answer = g.tg.sent_messages(A)[-1]
    assert str(answer["text"]).startswith("「火锅群」")
    return answer


async def test_forget_in_a_group_is_confirmed_privately(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        await setup(g)
        confirm = await asked_privately(g, f"/forget@{BOT} 火锅")
        assert "甲一" in str(confirm["text"])
        assert "私一" not in str(confirm["text"])

        await press(g, B, A, confirm, "忘掉第1条")  # not the scope's user: nothing changes
        assert g.tg.callback_answers[-1].get("text") == texts.NOT_YOURS
        assert len(await g.engine.memories(Scope(A, G1))) == 2

        await press(g, A, A, confirm, "忘掉第1条")  # in the private chat, on the group scope
        assert len(await g.engine.memories(Scope(A, G1))) == 1
        assert [m.event for m in await g.engine.memories(Scope(A))] == ["喜欢火锅 私一"]

        confirm_all = await asked_privately(g, f"/forget@{BOT} all")
        assert confirm_all["text"] == f"「火锅群」\n{texts.confirm_forget_all(1)}"
        await press(g, A, A, confirm_all, "确定忘掉全部")
        assert await g.engine.memories(Scope(A, G1)) == []
        assert len(await g.engine.memories(Scope(A))) == 1 and len(await g.engine.memories(Scope(B, G1))) == 1

        await g.group(B, G1, f"/forget@{BOT} 火锅")  # B has no private chat: a hint, not the list
        assert texts_in(g, G1)[-1] == gt.START_PRIVATE_FIRST
        assert not any("甲" in t or "乙" in t or "私一" in t for t in texts_in(g, G1))


async def test_why_in_a_group_goes_private(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        await setup(g)
        assert "甲二" in str((await asked_privately(g, f"/why@{BOT} 微辣"))["text"])
        await g.group(B, G1, f"/why@{BOT} 火锅")
        assert texts_in(g, G1)[-1] == gt.START_PRIVATE_FIRST
        await g.group(A, G1, f"/why@{BOT} 不存在的东西")  # nothing shown: answered in the group
        assert texts_in(g, G1)[-1] == texts.nothing_found("不存在的东西")
        assert not any("甲" in t or "乙" in t for t in texts_in(g, G1))


async def test_saying_forget_in_a_group_is_confirmed_privately(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        await setup(g)
        confirm = await asked_privately(g, f"@{BOT} 忘掉火锅")
        assert "甲一" in str(confirm["text"]) and all("gf:" in d for _, d in g.tg.buttons(confirm))
        await press(g, A, A, confirm, "忘掉第1条")
        assert len(await g.engine.memories(Scope(A, G1))) == 1
        await g.group(B, G1, f"@{BOT} 忘掉火锅")
        assert texts_in(g, G1)[-1] == gt.START_PRIVATE_FIRST
        assert not any("甲" in t or "乙" in t for t in texts_in(g, G1))


async def test_group_reviews_and_weekly_go_private_or_wait(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        g.tg.add_group(G1, "火锅群")
        await g.group(A, G1, f"/start_aiGF@{BOT}")
        scope, now = Scope(A, G1), utcnow()
        [handle] = await g.engine.remember(scope, [MemoryDraft("在学吉他 甲三", ["吉他"], 60.0,
                                                               validity=Validity.DAYS_7)], now)
        await g.engine.set_setting(WEEKLY, scope, True)
        switched_off: list[Scope] = []

        async def blocked(scope: Scope) -> None:
            switched_off.append(scope)

        review, weekly = proactive_senders(g.bot, blocked)
        later, hours = now + timedelta(days=8), (0, 24)
        g.tg.clear()
        # No private chat yet: nothing is sent anywhere (never to the group) and the review stays due.
        assert await reviews.review_round(g.engine, later, g.settings.tz, hours, review) == 0
        assert await reviews.weekly_round(g.engine, later, weekly) == 0
        assert g.tg.sent_messages() == []
        assert switched_off == []  # no private chat is not a blocked bot: the group's companion mode stays

        await g.private(A, "/start")
        assert await reviews.review_round(g.engine, later, g.settings.tz, hours, review) == 1
        assert await reviews.weekly_round(g.engine, later, weekly) == 1
        assert texts_in(g, G1) == []
        sent = g.tg.sent_messages(A)
        message = next(m for m in sent if "吉他" in str(m["text"]) and g.tg.buttons(m))
        assert str(message["text"]).startswith("「火锅群」")
        assert any(t.startswith("「火锅群」") and "这周" in t for t in texts_in(g, A))
        await press(g, A, A, message, "1 归档")
        assert (await g.engine.get(scope, handle)).status is Status.ARCHIVED


async def test_group_menu_and_help_name_the_private_commands(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        group_menu = [c["command"] for c in g.tg.menus_by_type()["all_group_chats"]]
        assert {"memories", "forget", "why"} <= set(group_menu)
        assert "/forget@{bot}" in gt.GROUP_HELP and "/why@{bot}" in gt.GROUP_HELP


async def test_forgetting_takes_the_members_lines_out_of_the_group_room(tmp_path: Path) -> None:
    """The room (recent group lines, in the process) quotes what a member said: forgetting one memory
    drops their lines that tell it; forgetting everything drops every line about them. Others' stay."""
    async with group_bot(tmp_path) as g:
        await setup(g)
        await g.group(A, G1, "我说过火锅要微辣的")  # unaddressed: room lines only
        await g.group(A, G1, "我家猫叫咪咪")
        await g.group(B, G1, "我家狗叫旺财")

        async def room_seen() -> str:
            g.llm.clear()
            g.llm.queue_chat("嗯嗯")
            await g.group(B, G1, f"@{BOT} 大家好")
            [request] = g.llm.chat_requests()
            return "\n".join(str(m["content"]) for m in request["messages"])

        confirm = await asked_privately(g, f"/forget@{BOT} 微辣")
        await press(g, A, A, confirm, "忘掉第1条")
        seen = await room_seen()
        assert "要微辣的" not in seen and "咪咪" in seen and "旺财" in seen

        confirm_all = await asked_privately(g, f"/forget@{BOT} all")
        await press(g, A, A, confirm_all, "确定忘掉全部")
        seen = await room_seen()
        assert "咪咪" not in seen and "旺财" in seen and "大家好" in seen
