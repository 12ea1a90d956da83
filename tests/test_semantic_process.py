"""Semantic recall with ``python bot.py`` as real processes: ``reindex`` embeds memories written while no
backend was configured (progress bar, counts), then the running bot brings a memory found only by meaning
into the reply call, against the fake Telegram, LLM and embeddings servers."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from companion.chat import texts
from companion.core.models import MemoryDraft, Scope, Validity
from companion.core.timeutil import utcnow
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from tests.fakes import FakeLLM, FakeTelegram
from tests.fakes.embeddings import FakeEmbeddings
from tests.process import ROOT, bot_env, run_cli
from tests.support import make_settings, vectors_in
from tests.test_e2e_process import USER, say

SYNONYMS = {"狗狗": "小狗"}


@pytest.fixture
async def servers() -> AsyncIterator[tuple[FakeTelegram, FakeLLM, FakeEmbeddings]]:
    async with FakeTelegram() as tg, FakeLLM() as llm, FakeEmbeddings(synonyms=SYNONYMS) as embeddings:
        yield tg, llm, embeddings


def vector_count(tmp: Path) -> int:
    return vectors_in(tmp / "data" / "memory.sqlite3")


async def test_reindex_then_recall_by_meaning_in_the_bot_process(
    servers: tuple[FakeTelegram, FakeLLM, FakeEmbeddings], tmp_path: Path
) -> None:
    tg, llm, embeddings = servers
    # Written before semantic recall was configured: no vectors yet.
    engine = await open_engine(make_settings(tmp_path), KeywordExtractor())
    try:
        await engine.remember(Scope(USER), [
            MemoryDraft("我家小狗豆豆这几天拉肚子", ["小狗", "豆豆", "拉肚子"], 85, Validity.DAYS_30),
            MemoryDraft("下周三要去面试", ["面试"], 80),
        ], utcnow())
    finally:
        await engine.close()
    env = bot_env(tg, llm, tmp_path)
    env.update(EMBEDDING_BASE_URL=embeddings.base_url, EMBEDDING_MODEL="fake-ngrams",
               EMBEDDING_API_KEY="sk-embed-secret", EMBEDDING_MIN_SIMILARITY="0.15")

    code, out, err = await run_cli(env, tmp_path, "reindex")
    assert code == 0, err
    assert "2 vectors written" in out and "reindex" in err and "2/2" in err  # the progress bar
    assert vector_count(tmp_path) == 2

    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        await tg.wait_for_call("setMyCommands", timeout=30)
        assert await say(tg, "/start_aiGF", 1) in (texts.GREETING_NEW, texts.GREETING_BACK)
        await say(tg, "狗狗今天不太吃东西", 2)
        assert "我家小狗豆豆这几天拉肚子" in str(llm.chat_requests()[-1]["messages"])
        assert any("狗狗今天不太吃东西" in text for text in embeddings.inputs)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
    assert proc.returncode == 0, output
    assert "semantic recall on" in output
    assert "sk-embed-secret" not in output and "豆豆" not in output


async def test_reindex_without_a_backend_says_what_to_set(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path / "data"), "EMBEDDINGS": "off"}
    code, _out, err = await run_cli(env, tmp_path, "reindex")
    assert code == 2 and "EMBEDDINGS=off" in err and "EMBEDDING_BASE_URL" in err
