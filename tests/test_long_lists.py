"""Every list fits Telegram: /memories and /forget over 60 long memories (an admin's note may hold a whole
message) through the fake Bot API server, which refuses a message over 4,096 characters as Telegram does.
Before, the answer failed and the user could not forget at all."""

from __future__ import annotations

from companion.core.models import MemoryDraft, Scope, Validity
from tests.support import USER, Live

LIMIT = 4096


async def test_a_long_list_is_answered_within_telegrams_limit_and_forgetting_works(live: Live) -> None:
    scope = Scope(USER)
    await live.say("/start_aiGF", 1)
    now = live.rig.clock()
    for n in range(60):
        words = f"第{n}条很长的备忘：" + "今天的天气非常好我们一起去公园散步" * 60
        await live.rig.engine.save_draft(scope, MemoryDraft(words, ["备忘", f"编号{n}"], 60, Validity.PERMANENT), now)
    listed = await live.say("/memories", 2)
    assert "第59条很长的备忘" in listed and "…" in listed and len(listed) <= LIMIT
    await live.say("/forget 备忘", 3)
    [prompt] = [m for m in live.tg.sent_messages(USER) if "选择要忘掉的" in str(m["text"])]
    assert all(len(str(m["text"])) <= LIMIT for m in live.tg.sent_messages(USER))
    data = next(d for text, d in live.tg.buttons(prompt) if "1" in text)
    live.tg.push_callback(USER, int(prompt["message_id"]), data, chat_id=int(prompt["chat_id"]))
    await live.tg.wait_for_callback_answers(1)
    assert len(await live.rig.engine.memories(scope)) == 59, "the chosen memory is forgotten"
