"""No scope lock is held across a model call: the extraction and the profile are asked for without it,
then checked under it against what changed meanwhile. A fake model blocks until the test has forgotten,
saved or edited in between; the forget or save must finish while the model is still answering."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from companion.core.models import MemoryDraft, Scope, Turn, Validity
from companion.engine.locks import LocalScopeLocks
from tests.fakes.llm import DEFAULT_JSON_REPLY
from tests.scripted import PROFILE_MARK, is_extraction
from tests.support import Rig

ME = Scope(777)
CAT = "养了一只猫叫咪咪"
# Guards against a hang if a lock were held over the model call (the forget would wait for it forever);
# not a speed assertion: the fake answers at once when released.
HANG = 10.0


class Gate:
    """A model answer that waits for the test: ``asked`` is set when the call arrives, ``release`` lets
    the answer go."""

    def __init__(self, mark: str, answer: str) -> None:
        self.mark, self.answer = mark, answer
        self.asked, self.release = asyncio.Event(), asyncio.Event()

    async def __call__(self, body: dict[str, Any]) -> str:
        if (self.mark == "extract" and is_extraction(body)) or self.mark in json.dumps(body, ensure_ascii=False):
            self.asked.set()
            await self.release.wait()
            return self.answer
        return DEFAULT_JSON_REPLY


def extraction_of(*events: str) -> str:
    items = [{"event": e, "keywords": ["猫", "咪咪"], "importance": 70, "validity": "forever", "type": "fact"}
             for e in events]
    return json.dumps({"memories": items}, ensure_ascii=False)


async def while_asked(gate: Gate, work: asyncio.Task[Any], meanwhile: Any) -> Any:
    await asyncio.wait_for(gate.asked.wait(), HANG)
    done = await asyncio.wait_for(meanwhile, HANG)  # would never finish under a lock held over the call
    gate.release.set()
    await asyncio.wait_for(work, HANG)
    return done


async def test_a_memory_forgotten_during_extraction_does_not_come_back(rig: Rig) -> None:
    [cat] = await rig.engine.remember(ME, [MemoryDraft(CAT, ["猫", "咪咪"], 70, Validity.PERMANENT)], rig.clock())
    await rig.engine.note_turn(ME, Turn("今天下班好累", "辛苦啦", rig.clock(), key="t1"))
    gate = Gate("extract", extraction_of(CAT))
    rig.llm.set_json_reply(gate)
    work = asyncio.create_task(rig.engine.consolidate(ME, rig.clock()))
    assert await while_asked(gate, work, rig.engine.forget(ME, [cat])) == 1
    assert CAT not in [m.event for m in await rig.engine.memories(ME)]
    assert await rig.engine.pending_count(ME) == 0


async def test_a_fact_saved_during_extraction_still_merges(rig: Rig) -> None:
    await rig.engine.note_turn(ME, Turn(f"我{CAT}", "好可爱", rig.clock(), key="t1"))
    gate = Gate("extract", extraction_of(CAT))
    rig.llm.set_json_reply(gate)
    work = asyncio.create_task(rig.engine.consolidate(ME, rig.clock()))
    saved = await while_asked(gate, work, rig.engine.save_draft(
        ME, MemoryDraft(CAT, ["猫", "咪咪"], 70, Validity.PERMANENT), rig.clock()))
    assert [m.id for m in await rig.engine.memories(ME) if m.event == CAT] == [saved.id]
    assert work.result().inserted == 0 and work.result().updated == 1


async def test_an_edit_during_extraction_keeps_its_newer_words(rig: Rig) -> None:
    [cat] = await rig.engine.remember(ME, [MemoryDraft(CAT, ["猫", "咪咪"], 60, Validity.PERMANENT)], rig.clock())
    await rig.engine.note_turn(ME, Turn(f"我{CAT}", "好可爱", rig.clock(), key="t1"))
    gate = Gate("extract", extraction_of(CAT))
    rig.llm.set_json_reply(gate)
    work = asyncio.create_task(rig.engine.consolidate(ME, rig.clock()))
    edited = f"{CAT}，三岁了"
    await while_asked(gate, work, rig.engine.edit(ME, cat, edited, rig.clock()))
    assert [(m.id, m.event) for m in await rig.engine.memories(ME)] == [(cat, edited)]
    assert await rig.engine.pending_count(ME) == 0


async def test_turns_forgotten_during_extraction_are_not_learned(rig: Rig) -> None:
    [cat] = await rig.engine.remember(ME, [MemoryDraft(CAT, ["猫", "咪咪"], 70, Validity.PERMANENT,
                                                       source_turns=("t1",))], rig.clock())
    await rig.engine.note_turn(ME, Turn(f"我{CAT}，它今天生病了", "要带去看看吗", rig.clock(), key="t1"))
    gate = Gate("extract", extraction_of("猫咪咪今天生病了"))
    rig.llm.set_json_reply(gate)
    work = asyncio.create_task(rig.engine.consolidate(ME, rig.clock()))
    await while_asked(gate, work, rig.engine.forget(ME, [cat]))
    assert work.result().turns == 0
    assert await rig.engine.memories(ME) == []
    assert await rig.engine.pending_count(ME) == 0


async def test_a_profile_built_from_a_memory_forgotten_meanwhile_is_not_kept(rig: Rig) -> None:
    [cat] = await rig.engine.remember(ME, [MemoryDraft(CAT, ["猫", "咪咪"], 70, Validity.PERMANENT)], rig.clock())
    gate = Gate(PROFILE_MARK, json.dumps({"core": f"用户{CAT}。", "dynamic": []}, ensure_ascii=False))
    rig.llm.set_json_reply(gate)
    work = asyncio.create_task(rig.engine.refresh_profile(ME, rig.clock(), force=True))
    await while_asked(gate, work, rig.engine.forget(ME, [cat]))
    profile = await rig.engine.profile(ME)
    assert profile is None or "咪咪" not in profile.core


async def test_local_locks_exclude_one_scope_and_are_dropped_when_idle() -> None:
    locks = LocalScopeLocks()
    order: list[str] = []

    async def hold(name: str, scope: Scope, step: asyncio.Event) -> None:
        async with locks.hold(scope):
            order.append(f"{name} in")
            await step.wait()
            order.append(f"{name} out")

    first, other = asyncio.Event(), asyncio.Event()
    a = asyncio.create_task(hold("a", ME, first))
    b = asyncio.create_task(hold("b", ME, first))
    c = asyncio.create_task(hold("c", Scope(778), other))
    await asyncio.sleep(0)
    assert locks.held(ME) and locks.held(Scope(778))
    assert order == ["a in", "c in"]  # b waits for a; c, another scope, does not
    other.set()
    first.set()
    await asyncio.gather(a, b, c)
    assert order.index("a out") < order.index("b in")
    assert not locks.held(ME) and locks._locks == {}
