"""Every list fits Telegram: /memories and /forget over 60 long memories (a memory is at most 200 characters
when it is written today, but a restored backup cell may hold 4,096) through the fake Bot API server, which
refuses a message over 4,096 characters as Telegram does.
Before, the answer failed and the user could not forget at all."""

from __future__ import annotations

from datetime import datetime

from companion.core.models import Memory, MemoryType, Origin, Scope, Tier, Validity
from tests.support import USER, Live

LIMIT = 4096


async def test_a_long_list_is_answered_within_telegrams_limit_and_forgetting_works(live: Live) -> None:
    scope = Scope(USER)
    await live.say("/start_aiGF", 1)
    now = live.rig.clock()
    # Written as a restore writes a backup's rows (the store's import), the way such long ones still arrive.
    walk = "今天的天气非常好我们一起去公园散步" * 60
    long_ones = [restored(f"第{n}条很长的备忘：{walk}", n, now) for n in range(60)]
    await live.rig.store.import_rows(scope, long_ones, now, keep_ids=False)
    listed = await live.say("/memories", 2)
    assert "第59条很长的备忘" in listed and "…" in listed and len(listed) <= LIMIT
    await live.say("/forget 备忘", 3)
    [prompt] = [m for m in live.tg.sent_messages(USER) if "选择要忘掉的" in str(m["text"])]
    assert all(len(str(m["text"])) <= LIMIT for m in live.tg.sent_messages(USER))
    data = next(d for text, d in live.tg.buttons(prompt) if "1" in text)
    live.tg.push_callback(USER, int(prompt["message_id"]), data, chat_id=int(prompt["chat_id"]))
    await live.tg.wait_for_callback_answers(1)
    assert len(await live.rig.engine.memories(scope)) == 59, "the chosen memory is forgotten"


def restored(words: str, n: int, at: datetime) -> Memory:
    return Memory(id=0, event=words, keywords=["备忘", f"编号{n}"], importance=60.0, created_at=at,
                  validity=Validity.PERMANENT, last_mentioned_at=None, updated_at=at, expires_at=None,
                  type=MemoryType.FACT, origin=Origin.RESTORE, mention_count=0, last_decay_at=at, tier=Tier.LONG)
