"""The AstrBot plugin's behaviour without AstrBot: scopes, settings, the request block and its scrubbing,
the engine's tools under the plugin's names and their bounds, commands' bounds, exact lifetimes, imports,
export, nightly upkeep and learning through a host's model (the plugin inside real AstrBot: tests/astrbot/)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from companion.core.csvexport import SCOPE_HEADER
from companion.core.csvformat import ZONE_HEADER
from companion.core.models import MemoryType
from companion.core.setting import EXACT_EXPIRY
from companion.engine.tools import NOT_FOUND
from companion.hosts.astrbot import replies as texts
from companion.hosts.astrbot.arguments import BadArgument
from companion.hosts.astrbot.fences import scrub
from companion.hosts.astrbot.importing import import_folder
from companion.hosts.astrbot.memory_service import MemoryService, for_prompt
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.scopes import Speaker
from companion.hosts.astrbot.tool_calls import NAMES, call, specs

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Model:
    """A host's model (the JsonModel protocol): answers every extraction with one memory."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def json(self, messages: Sequence[dict[str, Any]], *, purpose: str, max_tokens: int = 1200) -> dict[str, Any]:
        self.calls.append(purpose)
        return {"memories": [{"event": "喜欢爬山", "keywords": ["爬山"], "importance": 70, "validity": "permanent",
                              "type": "preference"}], "today": []}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def service(tmp_path: Path, clock: Clock) -> AsyncIterator[MemoryService]:
    opened = await MemoryService.open(tmp_path / "plugin", Options(learn_every=2), Model(), clock)
    try:
        yield opened
    finally:
        await opened.close()


ALICE_G1 = Speaker("qq", "alice", "g1")


def test_every_place_is_a_scope_of_its_own() -> None:
    places = [Speaker(p, s, g) for p in ("qq", "lark") for s in ("alice", "bob") for g in ("", "g1", "g2")]
    assert len({p.scope for p in places}) == len(places)
    assert all((p.scope.chat_id is None) == (not p.group) for p in places)
    assert Speaker("qq", "alice", "g1").scope == ALICE_G1.scope  # stable: a restart finds the same scope
    assert ALICE_G1.label == "qq:g1/alice" and ALICE_G1.private().label == "qq:alice"
    with pytest.raises(ValueError):
        Speaker("qq", "")


def test_settings_are_bounded_and_fall_back_to_defaults() -> None:
    options = Options.read({"capacity": 3, "inject_limit": "7", "tools": "yes", "backup_time": "25:99",
                            "timezone": "Mars/Base", "learn_every": None})
    assert (options.capacity, options.inject_limit, options.tools, options.backup_time, options.timezone,
            options.learn_every) == (10, 7, True, time(3, 30), "Asia/Shanghai", 4)
    assert Options.read(None) == Options()
    assert Options.read({"backup_time": "4:05"}).backup_time == time(4, 5)


def test_scrub_takes_the_plugins_blocks_out_of_the_history() -> None:
    block = f"{texts.BEGIN}\n- [1] 喜欢猫\n{texts.END}"
    history: list[dict[str, Any]] = [
        {"role": "user", "content": f"你好\n\n{block}"},
        {"role": "user", "content": [{"type": "text", "text": "看图"}, {"type": "text", "text": block}]},
        {"role": "tool", "content": block, "tool_call_id": "1"},
        {"role": "assistant", "content": "好的"},
    ]
    cleaned = scrub(history)
    assert "喜欢猫" not in json.dumps(cleaned, ensure_ascii=False)
    assert cleaned[0]["content"] == "你好" and cleaned[1]["content"] == [{"type": "text", "text": "看图"}]
    assert cleaned[2]["tool_call_id"] == "1" and cleaned[3] == history[3]


async def test_the_block_orders_instructions_first_and_holds_only_the_speaker(service: MemoryService) -> None:
    await service.add(ALICE_G1, "上周去了海边", kind="event")
    await service.add(ALICE_G1, "叫她小艾", kind="instruction")
    await service.add(ALICE_G1, "喜欢猫", kind="preference")
    await service.add(Speaker("qq", "bob", "g1"), "鲍勃的秘密")
    block = await service.reference(ALICE_G1, "周末做什么")
    assert block is not None and block.startswith(texts.BEGIN) and "鲍勃" not in block
    assert block.index("叫她小艾") < block.index("喜欢猫") < block.index("上周去了海边")
    assert await service.reference(ALICE_G1.private(), "周末做什么") is None
    assert [m.type for m in for_prompt(await service.memories(ALICE_G1), 2)] == \
        [MemoryType.INSTRUCTION, MemoryType.PREFERENCE]


async def tool(service: MemoryService, speaker: Speaker, name: str, **arguments: Any) -> dict[str, Any]:
    """A call of the plugin's tool ``name`` for ``speaker``, its JSON result unfenced."""
    text = await call(service.tools, speaker.scope, f"companion_memory_{name}", arguments)
    assert text.startswith(texts.BEGIN) and text.endswith(texts.END)
    result: dict[str, Any] = json.loads(text.removeprefix(texts.BEGIN).removesuffix(texts.END))
    return result


def test_the_plugin_offers_every_engine_tool_under_its_documented_name(service: MemoryService) -> None:
    offered = {spec.name: spec for spec in specs(service.tools)}
    assert set(offered) == set(NAMES) == {f"companion_memory_{verb}" for verb in
                                          ("add", "search", "list", "update", "forget", "move", "archive", "due")}
    engine = {t.name: t for t in service.tools(ALICE_G1.scope)}
    assert {name: spec.parameters for name, spec in offered.items()} == \
        {name: engine[NAMES[name]].parameters for name in offered}


@pytest.mark.parametrize("arguments", [
    {"content": ""}, {"content": "x" * 201}, {"content": "喜欢猫", "importance": 101},
    {"content": "喜欢猫", "importance": "很重要"}, {"content": "喜欢猫", "valid_seconds": -1},
    {"content": "喜欢猫", "type": "secret"}, {"content": "喜欢猫", "user_id": "bob"},
    {"content": "去杭州出差", "type": "event", "date": "3月4号"},  # not ISO
])
async def test_tool_arguments_out_of_bounds_are_refused(service: MemoryService, arguments: dict[str, Any]) -> None:
    assert "error" in await tool(service, ALICE_G1, "add", **arguments)
    assert await service.memories(ALICE_G1) == []


@pytest.mark.parametrize("arguments", [
    {"content": ""}, {"content": "x" * 501}, {"content": "喜欢猫", "importance": 11},
    {"content": "喜欢猫", "importance": "很重要"}, {"content": "喜欢猫", "valid_time": -1},
    {"content": "喜欢猫", "kind": "secret"},
])
async def test_command_arguments_out_of_bounds_are_refused(service: MemoryService, arguments: dict[str, Any]) -> None:
    with pytest.raises(BadArgument):
        await service.add(ALICE_G1, **arguments)
    assert await service.memories(ALICE_G1) == []


@pytest.mark.parametrize(("arguments", "shown"), [
    ({"content": "去杭州出差三天", "type": "event", "date": "2026-03-04", "end_date": "2026-03-06"},
     "3月4日-6日去杭州出差三天"),
    ({"content": "下周三去杭州出差", "type": "event"}, "3月4日（周三）去杭州出差"),  # the words, read in code
    ({"content": "结婚纪念日", "date": "2026-05-20", "yearly": True}, "每年5月20日结婚纪念日"),
    ({"content": "去杭州出差", "type": "event", "date": "2031-03-04"}, "去杭州出差"),  # implausible: dropped
])
async def test_the_add_tool_takes_the_models_date(service: MemoryService, arguments: dict[str, Any],
                                                  shown: str) -> None:
    saved = (await tool(service, ALICE_G1.private(), "add", **arguments))["saved"]
    (memory,) = await service.memories(ALICE_G1.private())
    assert memory.id == saved["handle"] and memory.shown == shown


async def test_an_exact_lifetime_ends_the_memory(service: MemoryService, clock: Clock) -> None:
    brief = await service.add(ALICE_G1, "明天下午开会", valid_time=3600)
    told = (await tool(service, ALICE_G1, "add", content="今晚八点看球", valid_seconds=1800))["saved"]["handle"]
    kept = await service.add(ALICE_G1, "喜欢猫")
    clock.now += timedelta(minutes=29)
    assert {m.id for m in await service.memories(ALICE_G1)} == {brief.id, told, kept.id}
    clock.now += timedelta(minutes=32)
    assert [m.id for m in await service.memories(ALICE_G1)] == [kept.id]
    assert [m["handle"] for m in (await tool(service, ALICE_G1, "list"))["memories"]] == [kept.id]
    assert "开会" not in (await service.reference(ALICE_G1, "明天开会吗") or "")
    await service.nightly()
    assert [m.id for m in await service.engine.memories(ALICE_G1.scope)] == [kept.id]  # forgotten, not hidden


async def test_an_earlier_versions_exact_lifetime_still_ends_the_memory(service: MemoryService, clock: Clock) -> None:
    old = await service.add(ALICE_G1, "明天下午开会")
    await service.engine.settings.set(EXACT_EXPIRY, ALICE_G1.scope,
                                      {str(old.id): (clock.now + timedelta(hours=1)).timestamp()})
    assert [m.id for m in await service.memories(ALICE_G1)] == [old.id]
    clock.now += timedelta(hours=2)
    assert await service.memories(ALICE_G1) == []
    assert await service.engine.memories(ALICE_G1.scope) == []  # forgotten, not hidden


async def test_tools_forget_by_handle_or_description_and_stay_in_the_scope(service: MemoryService) -> None:
    cat = await service.add(ALICE_G1, "喜欢猫")
    await service.add(ALICE_G1, "住在杭州")
    bob = Speaker("qq", "bob", "g1")
    other = await service.add(bob, "喜欢猫")
    # Another scope's handle: refused exactly as one that does not exist.
    assert await tool(service, ALICE_G1, "forget", handle=other.id) == {"error": NOT_FOUND.format(handle=other.id)}
    assert "error" in await tool(service, ALICE_G1, "update", handle=other.id, content="喜欢狗")
    assert (await tool(service, ALICE_G1, "forget", description="杭州"))["forgotten"] == 1
    assert [m.id for m in await service.memories(ALICE_G1)] == [cat.id]
    assert [m["content"] for m in (await tool(service, ALICE_G1, "search", query="猫"))["memories"]] == ["喜欢猫"]
    assert (await tool(service, ALICE_G1, "move", handle=cat.id, tier="long"))["moved"]["tier"] == "long"
    assert (await tool(service, ALICE_G1, "archive", handle=cat.id))["archived"] == cat.id
    assert await service.memories(ALICE_G1) == []
    assert [m.id for m in await service.memories(bob)] == [other.id]
    assert not await service.drop(ALICE_G1, other.id)


async def test_imports_of_both_designs_lose_nothing_and_double_nothing(service: MemoryService, tmp_path: Path) -> None:
    folder = tmp_path / "import"
    folder.mkdir()
    (folder / "10001.json").write_text(json.dumps({"memories": [
        {"id": 1, "content": "喜欢喝乌龙茶", "time": 1767225600, "importance": 3, "last_access_time": 1767312000,
         "valid_time": 0},
        {"id": 2, "content": "周五交报告", "time": "2026-02-28 09:00:00", "importance": 8, "valid_time": 7200},
    ]}, ensure_ascii=False), encoding="utf-8")
    (folder / "g5.json").write_text(json.dumps([{"user_id": "u1", "memories": [
        {"id": "x", "type": "preference", "content": "不吃香菜", "created_at": "2026-01-02T10:00:00+08:00"}]}],
        ensure_ascii=False), encoding="utf-8")
    (folder / "note.json").write_text('{"hello": 1}', encoding="utf-8")
    assert (await import_folder(service, folder, "qq")).added == 3
    again = await import_folder(service, folder, "qq")
    assert (again.added, again.skipped, again.bad) == (0, 3, 1)

    user = await service.engine.memories(Speaker("qq", "10001").scope)
    tea = next(m for m in user if m.event == "喜欢喝乌龙茶")
    assert tea.importance == 30 and tea.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert tea.last_accessed_at == datetime(2026, 1, 2, tzinfo=UTC)
    assert [m.event for m in await service.memories(Speaker("qq", "10001"))] == ["喜欢喝乌龙茶"]  # 周五交报告 expired
    (coriander,) = await service.memories(Speaker("qq", "u1", "g5"))
    assert coriander.type is MemoryType.PREFERENCE and coriander.created_at == datetime(2026, 1, 2, 2, tzinfo=UTC)
    assert "乌龙茶" in (await service.reference(Speaker("qq", "10001"), "喝点什么") or "")


async def test_export_and_nightly_backup_are_excel_friendly_csv(service: MemoryService, clock: Clock) -> None:
    await service.add(ALICE_G1, "喜欢猫，也喜欢狗", importance=7)
    await service.add(Speaker("lark", "bob"), "住在杭州")
    path, count = await service.export_csv("猫")
    raw = path.read_bytes()
    assert count == 1 and raw.startswith(b"\xef\xbb\xbf")
    (row,) = csv.DictReader(io.StringIO(raw.decode("utf-8-sig")))  # the Telegram bot's export, scopes labelled
    assert list(row)[:3] == [SCOPE_HEADER, "id", "事件"] and list(row)[-1] == ZONE_HEADER
    assert (row[SCOPE_HEADER], row["事件"], row["重要程度"]) == ("qq:g1/alice", "喜欢猫，也喜欢狗", "70.00")

    service.options = Options(backup_keep=2)
    for day in range(3):
        clock.now = START + timedelta(days=day)
        await service.nightly()
    assert len(list((service.data_dir / "backups").glob("memories-*.csv"))) == 2
    local_0330 = service.next_nightly(datetime(2026, 3, 1, 20, 0, tzinfo=UTC))  # 04:00 in Shanghai
    assert local_0330 == datetime(2026, 3, 2, 19, 30, tzinfo=UTC)


async def test_learning_goes_through_the_hosts_model_every_few_exchanges(service: MemoryService) -> None:
    await service.note_exchange(ALICE_G1, "我周末总去爬山", "真好")
    await service.wait_idle()
    assert await service.memories(ALICE_G1) == []
    await service.note_exchange(ALICE_G1, "这次去了黄山", "风景怎么样")
    await service.wait_idle()
    assert [m.event for m in await service.memories(ALICE_G1)] == ["喜欢爬山"]
    assert await service.memories(ALICE_G1.private()) == []


async def test_capacity_evicts_the_least_important_then_the_least_recently_used(tmp_path: Path, clock: Clock) -> None:
    service = await MemoryService.open(tmp_path / "cap", Options(capacity=10), None, clock)
    try:
        kept = []
        for i in range(10):
            clock.now += timedelta(minutes=1)
            animal = "猫狗鱼鸟虫马牛羊鸡鸭"[i]
            kept.append(await service.add(ALICE_G1, f"第{i}条：{animal}", importance=2 if i < 2 else 6))
        clock.now += timedelta(minutes=1)
        await service.add(ALICE_G1, "最新的一条：喜欢下雨天", importance=5)
        left = {m.event for m in await service.memories(ALICE_G1)}
        assert len(left) == 10 and kept[0].event not in left and kept[1].event in left
        assert "最新的一条：喜欢下雨天" in left
    finally:
        await service.close()
