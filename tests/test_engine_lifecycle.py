"""The engine's steering API on the in-memory store (fast), and the extraction-side rules (contradictions,
no re-learning what was forgotten) through the fake LLM server on SQLite."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from companion.core import rules, tiers
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Turn, Validity
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from memory import EngineConfig, MemoryEngine
from tests.support import Rig

NOW = datetime(2025, 12, 23, 4, 0, tzinfo=UTC)
DAY = timedelta(days=1)
ME, OTHER = Scope(11), Scope(22)
_KEYWORDS = KeywordExtractor()


@pytest.fixture
async def engine(any_store: MemoryStore) -> MemoryEngine:
    """An engine on every backend (``tests/conftest.py``), no model, a small capacity."""
    _KEYWORDS.load()
    return MemoryEngine(any_store, _KEYWORDS, EngineConfig(capacity=10))


async def test_explicit_save_without_the_model_keeps_the_words(engine: MemoryEngine) -> None:
    memory = await engine.save_explicit(ME, "回复我时别用表情", NOW, source_chat_id=11, source_message_id=5)
    assert (memory.event, memory.type, memory.tier, memory.origin) == (
        "回复我时别用表情", MemoryType.INSTRUCTION, Tier.LONG, Origin.EXPLICIT)
    assert (memory.source_chat_id, memory.source_message_id, memory.source_at) == (11, 5, NOW)
    assert memory.review_at == NOW + rules.REVIEW_PERIOD[Tier.LONG]
    fact = await engine.save_explicit(ME, "我在上海工作", NOW)
    assert fact.tier is Tier.MEDIUM and fact.validity is Validity.DAYS_30


async def test_moves_archive_restore_pin(engine: MemoryEngine) -> None:
    [h] = await engine.remember(ME, [MemoryDraft("周末去爬山", ["爬山"], 60.0, validity=Validity.DAYS_7)], NOW)
    assert (await engine.get(ME, h)).tier is Tier.SHORT
    promoted = await engine.promote(ME, h, NOW + DAY)
    assert (promoted.tier, promoted.validity, promoted.review_at) == (Tier.MEDIUM, Validity.DAYS_30, NOW + 31 * DAY)
    kept = await engine.keep(ME, h, NOW + 2 * DAY)
    assert kept.review_at == NOW + 32 * DAY and kept.tier is Tier.MEDIUM
    await engine.archive(ME, h, NOW + 3 * DAY)
    assert await engine.memories(ME) == []
    assert await engine.recall(ME, "周末爬山", NOW + 3 * DAY, limit=None, min_importance=0) == []
    back = await engine.restore(ME, h, NOW + 4 * DAY)
    assert back.status is Status.ACTIVE
    assert (await engine.pin(ME, h, True, NOW)).pinned


async def test_another_scopes_handle_is_refused_and_changes_nothing(engine: MemoryEngine) -> None:
    [mine] = await engine.remember(ME, [MemoryDraft("我的秘密", ["秘密"], 70.0)], NOW)
    for attempt in (engine.promote, engine.keep, engine.archive):
        with pytest.raises(NotYourMemoryError):
            await attempt(OTHER, mine, NOW)
    with pytest.raises(NotYourMemoryError):
        await engine.edit(OTHER, mine, "改掉", NOW)
    with pytest.raises(MemoryNotFoundError):
        await engine.get(ME, mine + 999)
    assert await engine.forget(OTHER, [mine]) == 0
    [still] = await engine.memories(ME)
    assert (still.event, still.tier, still.status) == ("我的秘密", Tier.MEDIUM, Status.ACTIVE)


async def test_capacity_evicts_in_order_and_spares_long_and_pinned(engine: MemoryEngine) -> None:
    keep = await engine.save_explicit(ME, "叫我小王", NOW)  # long-term: never evicted
    drafts = [MemoryDraft(f"小事{i}", [f"小事{i}"], float(20 + i), validity=Validity.DAYS_7) for i in range(12)]
    await engine.remember(ME, drafts, NOW)
    active = await engine.memories(ME)
    assert len(active) == 10
    events = {m.event for m in active}
    assert "叫我小王" in events and "小事0" not in events and "小事1" not in events and "小事2" not in events
    stats = await engine.stats(ME, NOW)
    assert stats.evicted_this_week == 3 and stats.by_tier[Tier.LONG] == 1
    assert keep.id in {m.id for m in active}


async def test_search_filters_and_records_only_a_use(engine: MemoryEngine) -> None:
    await engine.remember(ME, [MemoryDraft("对花生过敏", ["花生", "过敏"], 90.0, type=MemoryType.FACT),
                               MemoryDraft("喜欢奶茶", ["奶茶"], 50.0, type=MemoryType.PREFERENCE)], NOW)
    [hit] = await engine.search(ME, "花生", NOW)
    assert hit.event == "对花生过敏"
    assert [m.event for m in await engine.search(ME, "", NOW, types={MemoryType.PREFERENCE})] == ["喜欢奶茶"]
    assert await engine.search(ME, "", NOW, since=NOW + DAY) == []
    looked = await engine.get(ME, hit.id)
    assert (looked.access_count, looked.last_accessed_at) == (0, None), "a user's look is not a recall"
    await engine.search(ME, "花生", NOW, use=True)  # the model's search tool, in a conversation
    used = await engine.get(ME, hit.id)
    assert (used.access_count, used.last_accessed_at) == (1, NOW)


async def test_due_reviews_and_answers(engine: MemoryEngine) -> None:
    [h] = await engine.remember(ME, [MemoryDraft("最近在学吉他", ["吉他"], 60.0, validity=Validity.DAYS_7)], NOW)
    assert await engine.due_reviews(ME, NOW) == []
    later = NOW + 7 * DAY
    [(memory, suggestion)] = await engine.due_reviews(ME, later)
    assert memory.id == h and suggestion.action is tiers.Action.ARCHIVE
    await engine.review(ME, h, tiers.Action.PROMOTE, later)
    assert await engine.due_reviews(ME, later) == []
    gone = await engine.review(ME, h, tiers.Action.FORGET, later)
    assert gone.event == "最近在学吉他" and await engine.memories(ME) == []


async def test_forget_drops_the_queued_turns_that_told_it(engine: MemoryEngine) -> None:
    [h] = await engine.remember(ME, [MemoryDraft("生日是3月5日", ["生日", "3月5日"], 80.0)], NOW)
    await engine.note_turn(ME, Turn("我生日是3月5日哦", "记住啦", NOW))
    await engine.note_turn(ME, Turn("今天好冷", "多穿点", NOW))
    [gone] = await engine.forget_memories(ME, [h])
    assert gone.event == "生日是3月5日"
    assert [t.user for t in await engine.pending_turns(ME, 10)] == ["今天好冷"]
    provenance_target = await engine.get(ME, h)
    assert provenance_target.status is Status.FORGOTTEN and provenance_target.event == ""


async def test_contradiction_supersedes_and_forgotten_is_not_relearned(rig: Rig) -> None:
    engine, now = rig.engine, rig.clock()
    old = await engine.save_explicit(ME, "叫我小王", now)
    rig.llm.set_json_reply(lambda body: json.dumps({"memories": [
        {"event": "叫我老王", "keywords": ["老王", "称呼"], "importance": 80, "validity": "permanent",
         "type": "instruction", "replaces": old.id},
        {"event": "对猫毛过敏", "keywords": ["猫毛", "过敏"], "importance": 90, "type": "fact",
         "replaces": 999_999},  # not a memory it was shown: ignored
    ]}, ensure_ascii=False))
    await engine.note_turn(ME, Turn("以后叫我老王吧，还有我对猫毛过敏", "好的老王", now))
    await engine.consolidate(ME, now)
    shown = rig.llm.json_requests()[-1]["messages"][0]["content"]
    assert f"[{old.id}] 叫我小王" in shown
    active = {m.event: m for m in await engine.memories(ME)}
    assert set(active) == {"对猫毛过敏", "叫我老王"}  # the old name is not active; timeless: no date
    new = next(m for m in active.values() if "老王" in m.event)
    assert new.tier is Tier.LONG  # extracted, in the tier its nature calls for: an instruction applies always
    why = await engine.why(ME, new.id)
    assert [m.id for m in why.replaced] == [old.id]
    before = await engine.get(ME, old.id)
    assert (before.status, before.superseded_by) == (Status.SUPERSEDED, new.id)

    # Forget the allergy; the same words extracted again from turns still in context are not learned.
    allergy = next(m for m in active.values() if "猫毛" in m.event)
    await engine.forget(ME, [allergy.id])
    rig.llm.set_json_reply(json.dumps({"memories": [
        {"event": allergy.event, "keywords": ["猫毛", "过敏"], "importance": 90, "type": "fact"}]},
        ensure_ascii=False))
    await engine.note_turn(ME, Turn("嗯嗯", "好", now))
    await engine.consolidate(ME, now)
    assert not [m for m in await engine.memories(ME) if "猫毛" in m.event]
