"""What a reply may know, through the real engine, SQLite and the openai SDK against FakeLLM: every tier is
recallable, extraction places a memory by its nature, the profile is built across tiers and never from
its prompt's example, and each memory appears once in a prompt."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from companion.core.models import MemoryDraft, MemoryType, Scope, Tier, Turn, Validity
from companion.engine.profile import ProfilePolicy, needs_rebuild, parse_profile
from tests.fakes.llm import request_text
from tests.scripted import (
    COLD,
    EXTRACT_MARK,
    EXTRACT_PROFILE_MARK,
    PROFILE_MARK,
    ScriptedBrain,
    model_context,
    recalled_events,
    reference_data,
)
from tests.support import USER, Live, Rig

ME = Scope(818)

ALLERGY = {"event": "2026-11-24 对花生过敏", "keywords": ["花生", "过敏", "花生酱"], "importance": 90,
           "validity": "permanent", "type": "fact"}
OLD_EXAMPLE_WORDS = ("花生", "过敏", "奶茶", "小明")  # what a copied example used to bring in


def draft(event: str, keywords: list[str], tier: Tier, importance: float = 60.0, **extra: object) -> MemoryDraft:
    return MemoryDraft(event, keywords, importance, type=MemoryType.FACT, tier=tier, **extra)  # type: ignore[arg-type]


async def test_a_memory_of_any_tier_is_recalled_when_a_turn_touches_it(rig: Rig) -> None:
    """Older than the two newest short-term memories and below the five top medium-term ones: still
    recalled when the turn is about it."""
    now = rig.clock()
    trip = MemoryDraft("2026-12-02 要去上海出差", ["上海", "出差"], 70.0, Validity.DAYS_7, tier=Tier.SHORT,
                       created_at=now - timedelta(days=3))
    newer = [draft(f"新学的爱好{i}：{word}", [word], Tier.SHORT, created_at=now - timedelta(hours=i))
             for i, word in enumerate(("滑板", "围棋", "陶艺"))]
    medium = [draft(f"朋友{i}住在{city}", [city], Tier.MEDIUM, importance=95.0)
              for i, city in enumerate(("北京", "广州", "成都", "西安", "武汉", "南京"))]
    dog = draft("养了一只柯基叫豆豆", ["柯基", "豆豆", "狗"], Tier.MEDIUM, importance=55.0)
    await rig.engine.remember(ME, [trip, *newer, *medium, dog], now)
    context = await (await rig.engine.open_turn(ME)).context("下周三去上海出差要带什么", now, turn=1, cooldown={})
    assert [r.memory.event for r in context.recalled][:1] == ["2026-12-02 要去上海出差"]
    context = await (await rig.engine.open_turn(ME)).context("我的柯基豆豆", now, turn=2, cooldown={})
    assert "养了一只柯基叫豆豆" in [r.memory.event for r in context.recalled]


async def test_a_health_fact_is_learned_at_once_kept_long_term_and_reaches_the_reply(rig: Rig) -> None:
    brain = ScriptedBrain(facts={"过敏": ALLERGY})
    brain.install(rig.llm)
    await rig.chat.start(ME)
    assert (await rig.engine.profile(ME)) is not None
    await rig.chat.reply(ME, "跟你说，我对花生过敏的")
    await rig.chat.drain()
    assert brain.extraction_calls == 1, "a health word must trigger extraction at once"
    [allergy] = await rig.engine.memories(ME)
    assert allergy.event == "对花生过敏", "a timeless fact carries no date"
    assert (allergy.tier, allergy.validity) == (Tier.LONG, Validity.PERMANENT)
    profile = await rig.engine.profile(ME)
    assert profile is not None and "对花生过敏" in profile.core, "the first fact waited behind an empty profile"
    rig.clock.advance(minutes=2)
    await rig.chat.reply(ME, "朋友送了我一罐花生酱，能吃吗")
    assert "对花生过敏" in model_context(rig.llm.chat_requests()[-1])


class Thorough(ScriptedBrain):
    """A model that does all its extraction prompt asks: when the prompt asks for the profile too, it writes
    one from the memories the prompt lists and those it learns now (the core: every event, dates cut)."""

    def answer_json(self, body: dict[str, Any]) -> str:
        answer = json.loads(super().answer_json(body))
        text = request_text(body)
        if EXTRACT_PROFILE_MARK in text:
            memories = text.split("已经记住的内容（", 1)[-1].split("对话：", 1)[0]
            listed = [ln[2:].split("（")[0] for ln in memories.splitlines() if ln.startswith("- ")]
            events = [*(m["event"].split(" ", 1)[-1] for m in answer["memories"]), *listed]
            answer["profile"] = {"core": "；".join(dict.fromkeys(events)), "dynamic": []}
        return json.dumps(answer, ensure_ascii=False)


async def test_a_due_profile_is_rebuilt_in_the_extractions_own_call(rig: Rig) -> None:
    """The empty profile is due as soon as anything is learned: the extraction's call writes it, with no
    profile call of its own."""
    Thorough(facts={"过敏": ALLERGY}).install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "跟你说，我对花生过敏的")
    await rig.chat.drain()
    [call] = rig.llm.json_requests()
    assert EXTRACT_MARK in request_text(call) and EXTRACT_PROFILE_MARK in request_text(call)
    assert PROFILE_MARK not in request_text(call)
    profile = await rig.engine.profile(ME)
    assert profile is not None and profile.core == "对花生过敏"
    # Built now, from everything stored: not due again, so the next extraction does not ask for it.
    assert not await rig.engine.profiles.due(ME, rig.clock())


async def test_a_profile_written_with_a_forgotten_fact_told_again_is_not_kept(rig: Rig) -> None:
    """What the user had forgotten, told again, is not learned; the profile the same call wrote with it is
    not kept either, and the rebuild of its own is made from what is stored."""
    brain = Thorough(facts={"过敏": ALLERGY})
    brain.install(rig.llm)
    await rig.chat.start(ME)
    [handle] = await rig.engine.remember(ME, [MemoryDraft("对花生过敏", ["花生", "过敏"], 90.0)], rig.clock())
    await rig.engine.forget(ME, [handle])
    await rig.chat.reply(ME, "跟你说，我对花生过敏的")
    await rig.chat.drain()
    assert brain.extraction_calls == 1 and not await rig.engine.memories(ME)
    profile = await rig.engine.profile(ME)
    assert profile is None or "花生" not in profile.core + str(profile.dynamic)


async def test_a_profile_due_on_a_plain_turn_waits_for_the_next_extraction(rig: Rig) -> None:
    """Past the minimum refresh, with memories learned since, the profile is due; a turn that starts no
    extraction asks nothing (it is queued, and would make a profile built now stale at once): the next
    extraction's call rebuilds it, with what that turn told."""
    cat = {"event": "养了一只猫叫布丁", "keywords": ["布丁", "猫"], "importance": 65, "validity": "permanent",
           "type": "fact"}
    Thorough(facts={"过敏": ALLERGY, "布丁": cat}).install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "跟你说，我对花生过敏的")
    await rig.chat.drain()
    rig.clock.advance(hours=7)
    await rig.engine.remember(ME, [MemoryDraft("住在杭州", ["杭州"], 60.0)], rig.clock())
    assert await rig.engine.profiles.due(ME, rig.clock())
    asked = len(rig.llm.json_requests())
    for text in ("我家猫叫布丁", "今天天气不错"):
        await rig.chat.reply(ME, text)
        await rig.chat.drain()
    assert len(rig.llm.json_requests()) == asked, "a plain turn asked the model"
    await rig.chat.reply(ME, "最近又感冒了")  # news: extracted at once
    await rig.chat.drain()
    [call] = rig.llm.json_requests()[asked:]
    assert EXTRACT_PROFILE_MARK in request_text(call)
    profile = await rig.engine.profile(ME)
    assert profile is not None and "养了一只猫叫布丁" in profile.core and "住在杭州" in profile.core


async def test_the_profile_is_built_from_every_tier(rig: Rig) -> None:
    """A permanent fact still short-term, behind dozens of newer small things and more long-term memories
    than one profile build reads, is in the profile."""
    now = rig.clock()
    allergy = draft("对花生过敏", ["花生", "过敏"], Tier.SHORT, importance=90.0, validity=Validity.PERMANENT,
                    created_at=now - timedelta(days=1))
    chatter = [MemoryDraft(f"2026-11-2{i % 5} 小事{i}", [f"小事{i}"], 40.0, Validity.DAYS_7, tier=Tier.SHORT)
               for i in range(60)]
    settled = [draft(f"住在第{i}个小区", [f"小区{i}"], Tier.LONG, importance=50.0) for i in range(50)]
    await rig.engine.remember(ME, [allergy, *chatter, *settled], now)
    ScriptedBrain().install(rig.llm)
    profile = await rig.engine.refresh_profile(ME, now, force=True)
    assert profile is not None and "对花生过敏" in profile.core


def copycat(body: dict[str, object]) -> str:
    """A lazy model: answers a profile request with the format example its prompt shows."""
    prompt = str(body["messages"][0]["content"])  # type: ignore[index]
    return next(line for line in prompt.splitlines() if line.startswith('{"core"'))


async def test_the_profile_prompts_example_never_reaches_a_profile(rig: Rig) -> None:
    now = rig.clock()
    await rig.engine.remember(ME, [draft("喜欢周末去爬山", ["爬山"], Tier.LONG, importance=60.0),
                                   draft("养了一只猫叫布丁", ["猫", "布丁"], Tier.MEDIUM)], now)
    rig.llm.set_json_reply(copycat)
    copied = await rig.engine.refresh_profile(ME, now, force=True)
    example = parse_profile(json.loads(copycat(rig.llm.json_requests()[-1])), guard=False)
    assert copied is not None
    said = copied.core + "".join(t.text for t in copied.dynamic)
    assert example.core not in said and not any(t.text in said for t in example.dynamic)
    assert not any(word in said for word in OLD_EXAMPLE_WORDS)
    # A model that writes from the memories: none of the prompt's own words either.
    ScriptedBrain().install(rig.llm)
    built = await rig.engine.refresh_profile(ME, now, force=True)
    assert built is not None and "喜欢周末去爬山" in built.core
    assert not any(word in built.core for word in (*OLD_EXAMPLE_WORDS, "core", "长期稳定", "关键词"))


async def test_a_memory_appears_once_in_a_prompt(rig: Rig) -> None:
    """Recalled and learned today at once: shown once, as recalled."""
    now = rig.clock()
    await rig.engine.remember(ME, [draft("对花生过敏", ["花生", "过敏", "花生酱"], Tier.MEDIUM, importance=90.0)], now)
    rig.llm.set_json_reply(json.dumps({"today": ["对花生过敏"], "memories": []}, ensure_ascii=False))
    await rig.engine.note_turn(ME, Turn("我今天又对花生过敏了", "要小心", now))
    await rig.engine.consolidate(ME, now)  # the same words among today's events too
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "朋友送了我一罐花生酱，能吃吗")
    block = reference_data(rig.llm.chat_requests()[-1])
    assert len(re.findall("对花生过敏", block)) == 1, block


async def test_what_the_profile_says_is_not_repeated_as_recalled_or_learned_today(rig: Rig) -> None:
    """A fact the profile core already carries is in the prompt once: not again among the recalled memories
    or as learned today."""
    now = rig.clock()
    await rig.engine.remember(ME, [draft("对花生过敏", ["花生", "过敏", "花生酱"], Tier.LONG, importance=90.0,
                                         validity=Validity.PERMANENT)], now)
    ScriptedBrain().install(rig.llm)
    await rig.chat.start(ME)
    profile = await rig.engine.profile(ME)
    assert profile is not None and "对花生过敏" in profile.core
    await rig.chat.reply(ME, "朋友送了我一罐花生酱，能吃吗")
    block = reference_data(rig.llm.chat_requests()[-1])
    assert len(re.findall("对花生过敏", block)) == 1, block


async def test_a_reset_summary_names_the_days_not_a_stale_word(rig: Rig) -> None:
    ScriptedBrain(summaries={"上海": ("聊到下周要去上海出差，有点紧张", ["上海", "出差"])}).install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "下周要去上海出差")
    await rig.chat.reply(ME, "有点紧张")
    receipt = await rig.chat.reset(ME)
    assert re.search(r"刚才聊的我记下了：聊到\d+月\d+日-(\d+月)?\d+日要去上海出差，有点紧张$", receipt), receipt
    assert not re.search(r"\d{4}-\d{1,2}-\d{1,2}", receipt)


async def test_looking_at_memories_is_not_being_recalled(live: Live) -> None:
    """/memories and /why are the user looking, not the companion remembering: "被想起" counts neither."""
    await live.say("/start_aiGF", 1)
    live.llm.set_json_reply(json.dumps({"event": "我对花生过敏", "keywords": ["花生", "过敏"], "type": "fact",
                                        "importance": 90, "core": True}, ensure_ascii=False))
    await live.say("记住：我对花生过敏", 2)
    await live.say("/memories", 3)
    await live.say("/why 花生", 4)
    [saved] = await live.rig.engine.memories(Scope(USER))
    assert (saved.access_count, saved.last_accessed_at) == (0, None)
    live.llm.set_chat_reply("那花生酱可不能吃哦。")
    await live.say("朋友送了我一罐花生酱", 5)
    [used] = await live.rig.engine.memories(Scope(USER))
    assert used.access_count == 1 and used.mention_count == 1


@pytest.mark.parametrize(("age", "stale", "empty", "rebuild"), [
    (timedelta(minutes=5), True, True, True),  # an empty profile: the first facts go in at once
    (timedelta(minutes=5), True, False, False),  # otherwise a retold detail waits for min_refresh
    (timedelta(minutes=5), False, True, False),  # empty and nothing learned: nothing to build from
    (timedelta(hours=7), True, False, True),
    (timedelta(hours=25), False, False, True),
])
def test_when_a_profile_is_rebuilt(age: timedelta, stale: bool, empty: bool, rebuild: bool) -> None:
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    assert needs_rebuild(now - age, stale, now, ProfilePolicy(), empty=empty) is rebuild


async def test_forgetting_one_fact_never_hides_the_others_until_the_profile_is_rebuilt(rig: Rig) -> None:
    """A forget drops the profile (its text may carry the forgotten fact); until the next build, the newest
    lasting facts stand in for its core, the forgotten one not among them."""
    now = rig.clock()
    days_ago = now - timedelta(days=3)
    allergy = draft("对花生过敏", ["花生", "过敏"], Tier.LONG, importance=90.0, validity=Validity.PERMANENT,
                    created_at=days_ago)
    cat = draft("养了一只猫叫咪咪", ["猫", "咪咪"], Tier.MEDIUM, importance=70.0, created_at=days_ago)
    await rig.engine.remember(ME, [allergy, cat], now)
    ScriptedBrain().install(rig.llm)
    profile = await rig.engine.refresh_profile(ME, now, force=True)
    assert profile is not None and "咪咪" in profile.core and "花生" in profile.core
    handle = next(m.id for m in await rig.engine.memories(ME) if "花生" in m.event)
    assert await rig.engine.forget(ME, [handle]) == 1
    context = await (await rig.engine.open_turn(ME)).context("今天下班有点累", now, turn=1, cooldown={})
    assert "养了一只猫叫咪咪" in context.core
    assert "花生" not in json.dumps([context.core, context.recent, context.today], ensure_ascii=False)


async def test_a_lasting_fact_learned_after_the_profile_was_built_stays_until_a_rebuild_takes_it_in(
    rig: Rig,
) -> None:
    """Told late on a day the profile was already built: shown as learned today that day, and days later,
    before any rebuild, still in the core (no longer marked new); gone from there once a rebuild has it."""
    ScriptedBrain().install(rig.llm)
    start = rig.clock()
    allergy = draft("对花生过敏", ["花生", "过敏"], Tier.LONG, importance=90.0, validity=Validity.PERMANENT,
                    created_at=start)
    await rig.engine.remember(ME, [allergy], start)
    profile = await rig.engine.refresh_profile(ME, start, force=True)
    assert profile is not None and profile.core == "对花生过敏"
    later = start + timedelta(hours=2)
    cat = draft("养了一只猫叫咪咪", ["猫", "咪咪"], Tier.MEDIUM, importance=65.0, validity=Validity.PERMANENT,
                created_at=later)
    await rig.engine.remember(ME, [cat], later)
    context = await (await rig.engine.open_turn(ME)).context("今天下班有点累", later, turn=1, cooldown={})
    assert context.recent == ["养了一只猫叫咪咪"] and "咪咪" not in context.core
    back = start + timedelta(days=5)  # the user is back; no extraction has run since
    context = await (await rig.engine.open_turn(ME)).context("今天下班有点累", back, turn=2, cooldown={})
    assert context.core == "对花生过敏；养了一只猫叫咪咪" and context.recent == []
    rebuilt = await rig.engine.refresh_profile(ME, back, force=True)
    assert rebuilt is not None and "咪咪" in rebuilt.core
    context = await (await rig.engine.open_turn(ME)).context("今天下班有点累", back, turn=3, cooldown={})
    assert context.core == rebuilt.core, "a fact the rebuilt core holds is not added again"


async def test_what_was_just_told_does_not_come_back_on_the_next_turn_through_the_window(rig: Rig) -> None:
    """The recall window (the user's previous turns) must not carry a memory learned from those very turns
    into the next turn, whatever it is about: the reply call has them verbatim. A turn that is itself about
    the memory still recalls it."""
    cold = {**COLD, "event": "2026-11-25 感冒发烧，身体不舒服"}
    ScriptedBrain(facts={"感冒": cold}).install(rig.llm)
    await rig.chat.start(ME)
    await rig.chat.reply(ME, "我感冒发烧了，身体不舒服")  # a health word: learned at once, after the reply
    await rig.chat.drain()
    assert [m.event for m in await rig.engine.memories(ME)] == ["感冒发烧，身体不舒服"]
    rig.clock.advance(minutes=1)
    await rig.chat.reply(ME, "今天天气还不错")
    assert recalled_events(rig.llm.chat_requests()[-1]) == []
    rig.clock.advance(minutes=1)
    await rig.chat.reply(ME, "感冒还没好，一直发烧，身体不舒服")
    # The model is told the day it happened, in words (the day is data, not part of the stored words).
    assert recalled_events(rig.llm.chat_requests()[-1]) == ["11月25日（周三）感冒发烧，身体不舒服"]


async def test_a_retold_memory_keeps_the_recalls_it_had(rig: Rig) -> None:
    """Recalled into a reply (an access, written by the turn), then told again and merged by extraction from
    the cached index's copy: the merge brings the new words, the access stays (reviews, eviction and /why
    read it)."""
    guitar = {"event": "最近在学吉他，每天练半小时", "keywords": ["吉他", "练琴"], "importance": 60, "validity": "30d",
              "type": "event"}
    ScriptedBrain(facts={"吉他": guitar}).install(rig.llm)
    await rig.chat.start(ME)
    now = rig.clock()
    await rig.engine.remember(ME, [MemoryDraft("最近在学吉他", ["吉他", "练琴"], 60.0, Validity.DAYS_30,
                                               type=MemoryType.EVENT, created_at=now - timedelta(days=2))], now)
    rig.clock.advance(minutes=1)
    await rig.chat.reply(ME, "我这周哪天练吉他来着")
    assert recalled_events(rig.llm.chat_requests()[-1]) == ["最近在学吉他"]
    await rig.engine.consolidate(ME, rig.clock())
    [memory] = await rig.engine.memories(ME)
    assert memory.event.endswith("最近在学吉他，每天练半小时"), "the retelling merged"
    assert (memory.access_count, memory.last_accessed_at) == (1, now + timedelta(minutes=1))
