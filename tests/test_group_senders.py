"""Group messages whose sender is a chat: an anonymous admin (the group itself) may use the admin
commands but has no personal scope; a post on behalf of a channel is never anyone's memory."""

from __future__ import annotations

from pathlib import Path

from companion.chat import group_texts as gt
from companion.core.models import Scope
from tests.fakes.telegram import FakeTelegram
from tests.groupkit import BOT, GroupBot, group_bot

A = 1001
G1 = -1001001
ANON = FakeTelegram.ANONYMOUS_ADMIN_ID
CHANNEL = (-1009009, "新闻频道")


def last(g: GroupBot) -> str:
    return str(g.tg.sent_messages(G1)[-1]["text"])


async def nothing_stored(g: GroupBot) -> None:
    for user in (ANON, FakeTelegram.CHANNEL_BOT_ID):
        scope = Scope(user, G1)
        assert not g.chat.is_active(scope) and await g.engine.pending_count(scope) == 0
        assert await g.engine.memories(scope) == []
    assert all(s.user_id not in (ANON, FakeTelegram.CHANNEL_BOT_ID) for s in await g.engine.active_scopes())


async def test_anonymous_admin_uses_admin_commands_but_has_no_scope(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        g.tg.add_group(G1, "一群", admins=(A,))
        await g.group(A, G1, f"/start_aiGF@{BOT}")
        await g.seed(Scope(A, G1), "喜欢火锅 甲一", ["火锅"])

        g.tg.push_group_as(G1, f"/group_memory@{BOT} off")
        await g.deliver()
        assert last(g) == gt.GROUP_MEMORY_OFF
        g.tg.push_group_as(G1, f"/group_memory@{BOT} on")
        await g.deliver()
        assert last(g) == gt.GROUP_MEMORY_ON

        for said in (f"/start_aiGF@{BOT}", f"/memories@{BOT}", f"/forget@{BOT} 火锅", f"/share_private@{BOT} on",
                     f"@{BOT} 记住：我喜欢吃面", "/start_aiGF"):
            g.tg.push_group_as(G1, said)
            await g.deliver()
            assert last(g) == gt.ANONYMOUS_ADMIN, said
        await nothing_stored(g)
        assert g.llm.chat_requests() == []

        g.tg.push_group_as(G1, f"/forget_group@{BOT}")
        await g.deliver()
        confirm = g.tg.sent_messages(G1)[-1]
        assert confirm["text"] == gt.CONFIRM_FORGET_GROUP
        yes = next(d for label, d in g.tg.buttons(confirm) if label == gt.FORGET_GROUP_YES)
        g.tg.push_callback(A, int(confirm["message_id"]), yes, chat_id=G1)  # the admin's own account presses
        await g.deliver()
        assert last(g) == gt.GROUP_FORGOTTEN.format(count=1)
        assert await g.engine.memories(Scope(A, G1)) == []


async def test_channel_posts_are_nobodys_memory(tmp_path: Path) -> None:
    async with group_bot(tmp_path) as g:
        g.tg.add_group(G1, "一群", admins=(A,))
        for said in (f"/start_aiGF@{BOT}", f"@{BOT} 记住：我喜欢吃面"):
            g.tg.push_group_as(G1, said, channel=CHANNEL)
            await g.deliver()
            assert last(g) == gt.AS_CHANNEL
        g.tg.push_group_as(G1, f"/group_memory@{BOT} off", channel=CHANNEL)
        await g.deliver()
        assert last(g) == gt.ADMINS_ONLY
        sent = len(g.tg.sent_messages(G1))
        g.tg.push_group_as(G1, f"@{BOT} 今天的新闻", channel=CHANNEL, automatic_forward=True)
        g.tg.push_group_as(G1, "频道里的一条普通消息", channel=CHANNEL)
        await g.deliver()
        assert len(g.tg.sent_messages(G1)) == sent
        await nothing_stored(g)

        await g.group(A, G1, f"/start_aiGF@{BOT}")
        await g.group(A, G1, f"@{BOT} 你看到频道说什么了吗")
        assert "频道里的一条普通消息" in str(g.llm.chat_requests()[-1]["messages"][-1]["content"])  # context only
