"""The built plugin inside real AstrBot: tools save in the speaker's scope, requests carry it to that
speaker only, commands, export, forget, import and a restart (issue 20, "Proof"). The tests share one
AstrBot (each uses senders of its own); the last restarts it and finds what the others left."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from tests.astrbot.conftest import Rig
from tests.astrbot.model import PROFILE, last_user, memory_block, reply_to, saved, told

pytestmark = pytest.mark.asyncio(loop_scope="module")

SAID = "我对花生过敏"
SECRET = saved(SAID)


async def test_a_tool_call_saves_in_the_speakers_scope_and_only_they_are_told(rig: Rig) -> None:
    astrbot, fake_llm = rig.bot, rig.llm
    fake_llm.requests.clear()
    replies = await astrbot.send(f"/记住：{SAID}", sender="alice", group="g1")
    assert replies == ["好的，记住了。"]
    tools = [t["function"]["name"] for t in fake_llm.requests[0]["tools"]]
    assert "companion_memory_add" in tools and "companion_memory_forget" in tools

    fake_llm.requests.clear()
    await astrbot.send("/今天吃什么好", sender="alice", group="g1")
    assert SECRET in last_user(reply_to(fake_llm.requests))

    for who, group, platform in (("bob", "g1", "qq"), ("alice", "g2", "qq"), ("alice", "", "qq"),
                                 ("alice", "g1", "lark")):
        fake_llm.requests.clear()
        text = "/今天吃什么好" if group else "今天吃什么好"
        await astrbot.send(text, sender=who, group=group, platform=platform)
        assert fake_llm.requests, (who, group, platform)
        assert all(SECRET not in told(r) for r in fake_llm.requests), (who, group, platform)


async def test_admin_commands_export_and_forget(rig: Rig) -> None:
    astrbot, fake_llm = rig.bot, rig.llm
    (added,) = await astrbot.send("/增加记忆 carol 喜欢猫 7", sender="admin1")
    handle = added.rsplit("#", 1)[1].rstrip("。")
    assert added == f"已为 carol 增加记忆 #{handle}。"
    refused = await astrbot.send("/增加记忆 carol 喜欢狗", sender="dave")
    assert not any("已为" in r for r in refused)
    await astrbot.send("/删除记忆 carol " + handle, sender="dave")
    await astrbot.send("/修改记忆 carol " + handle + " 喜欢狗", sender="dave")

    fake_llm.requests.clear()
    await astrbot.send("最近怎么样", sender="carol")
    block = memory_block(reply_to(fake_llm.requests))
    assert "喜欢猫" in block and "喜欢狗" not in block

    assert await astrbot.send(f"/修改记忆 carol {handle} 喜欢橘猫 9", sender="admin1") == \
        [f"已修改 carol 的记忆 #{handle}。"]
    await astrbot.send("/导出记忆", sender="dave")
    assert astrbot.files == []
    replies = await astrbot.send("/导出记忆 橘猫", sender="admin1")
    assert replies[0].startswith("已导出 1 条记忆")
    (exported,) = astrbot.files
    rows = list(csv.DictReader(io.StringIO(Path(exported).read_text(encoding="utf-8-sig"))))
    assert [(r["范围"], r["id"], r["事件"], r["重要程度"]) for r in rows] == \
        [("qq:carol", handle, "喜欢橘猫", "90.00")]  # the Telegram bot's export format

    assert await astrbot.send(f"/忘记 {handle}", sender="mallory") == [f"没有找到这条记忆（编号 {handle}）。"]
    assert await astrbot.send(f"/忘记 {handle}", sender="carol") == [f"好的，已经忘掉第 {handle} 条。"]
    fake_llm.requests.clear()
    await astrbot.send("最近怎么样", sender="carol")
    assert "橘猫" not in told(reply_to(fake_llm.requests))

    await astrbot.send(f"/记住：{SAID}", sender="carol")
    assert (await astrbot.send("/忘记全部", sender="carol"))[0].startswith("确定要忘掉")
    assert await astrbot.send("/忘记全部 确认", sender="carol") == ["好的，已经全部忘掉了（1 条）。"]
    assert await astrbot.send("/我的记忆", sender="carol") == ["我还没有记住关于你的事。"]


async def test_a_group_sees_a_short_list_where_it_cannot_go_privately(rig: Rig) -> None:
    for i in range(7):
        await rig.bot.send(f"/增加记忆 gina 第{i}件事 5", sender="admin1", group="g3")
    (listed,) = await rig.bot.send("/我的记忆", sender="gina", group="g3")
    assert listed.splitlines()[0] == "我记得关于你的这些（7 条）：" and len(listed.splitlines()) == 7
    assert "还有 2 条没有列出" in listed
    assert await rig.bot.send("/我的记忆", sender="gina") == ["我还没有记住关于你的事。"]
    assert await rig.bot.send("/我的记忆", sender="hank", group="g3") == ["我还没有记住关于你的事。"]


async def test_the_profile_is_built_by_astrbots_provider_and_told_the_next_time(rig: Rig) -> None:
    await rig.bot.send("/增加记忆 paul 喜欢爬山 8", sender="admin1")
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="paul")
    (job,) = [r for r in rig.llm.requests if "用户画像" in last_user(r)]  # after the reply, in the background
    assert "喜欢爬山" in last_user(job)
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="paul")
    assert f"{PROFILE}喜欢爬山" in memory_block(reply_to(rig.llm.requests))
    assert not any("用户画像" in last_user(r) for r in rig.llm.requests)  # not rebuilt every turn
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="quinn")
    assert "喜欢爬山" not in told(reply_to(rig.llm.requests))


PER_USER = [  # the per-user design's {user_id}.json
    {"id": 1, "content": "喜欢喝乌龙茶", "time": 1735689600, "importance": 6, "last_access_time": 1735776000,
     "valid_time": 0},
    {"id": 2, "content": "下周要考驾照", "time": 1735689600, "importance": 9, "last_access_time": 1735776000,
     "valid_time": 86400 * 365 * 50},
]
PER_GROUP = {"users": {"u7": [  # the group design's {group_id}.json
    {"id": "a1", "type": "instruction", "content": "叫他老七", "created_at": "2025-01-02 10:00:00",
     "updated_at": "2025-01-03 10:00:00"},
]}}


async def test_imports_of_both_formats_double_nothing(rig: Rig) -> None:
    folder = rig.data / "import"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "12345.json").write_text(json.dumps(PER_USER, ensure_ascii=False), encoding="utf-8")
    (folder / "g9.json").write_text(json.dumps(PER_GROUP, ensure_ascii=False), encoding="utf-8")
    (folder / "broken.json").write_text("[1, 2", encoding="utf-8")
    assert await rig.bot.send("/导入记忆", sender="dave") != ["导入完成：新增 3 条，已存在跳过 0 条，无法识别 1 个。"]
    assert await rig.bot.send("/导入记忆", sender="admin1") == ["导入完成：新增 3 条，已存在跳过 0 条，无法识别 1 个。"]
    assert await rig.bot.send("/导入记忆", sender="admin1") == ["导入完成：新增 0 条，已存在跳过 3 条，无法识别 1 个。"]
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="12345")
    block = memory_block(reply_to(rig.llm.requests))
    assert "喜欢喝乌龙茶" in block and "下周要考驾照" in block, block


async def test_a_restart_keeps_everything(rig: Rig) -> None:
    await rig.bot.send(f"/记住：{SAID}", sender="12345")
    await rig.restart()
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="12345")
    block = memory_block(reply_to(rig.llm.requests))
    assert all(text in block for text in ("喜欢喝乌龙茶", "下周要考驾照", SECRET)), block
    rig.llm.requests.clear()
    await rig.bot.send("/周末干嘛", sender="u7", group="g9")
    assert "叫他老七" in memory_block(reply_to(rig.llm.requests))
    rig.llm.requests.clear()
    await rig.bot.send("/今天吃什么好", sender="alice", group="g1")
    assert SECRET in memory_block(reply_to(rig.llm.requests))
    rig.llm.requests.clear()
    await rig.bot.send("周末干嘛", sender="u7")
    assert "叫他老七" not in told(reply_to(rig.llm.requests))
