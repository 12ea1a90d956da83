"""Property: whatever users, groups and private chats do (commands, buttons, addressed and unaddressed
messages, recall), no LLM request and no message the bot sends carries a memory of another scope.

Every scope gets memories marked with a token of its own, all sharing the same keyword, so recall in any
scope would find any of them if isolation broke. A step's LLM requests (the reply, extraction, profile
rebuilds it starts) may hold only the tokens of the step's scope, plus the speaker's private ones in a
group after ``/share_private on``. Messages to a group may hold only that group's tokens; messages to a
private chat only that user's own."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.core.models import MemoryType, Scope
from tests.fakes.llm import Answer, ToolCallAnswer, request_text
from tests.groupkit import BOT, GroupBot, group_bot
from tests.pgtest import pg_schema
from tests.scripted import ScriptedBrain

A, B = 1001, 1002
G1, G2 = -1001001, -1002002
USERS = (A, B)
PLACES: tuple[int | None, ...] = (None, G1, G2)
ACTIONS = ("start", "stop", "talk", "chatter", "reply", "share_on", "share_off", "memories", "forget", "why",
           "memory_off", "memory_on", "press", "say_forget", "anonymous")
TOKEN = re.compile(r"ZQ[a-z0-9_]+X")

Step = tuple[int, int | None, str]


def token(scope: Scope) -> str:
    return f"ZQ{scope.key}X"


def command(name: str, place: int | None, args: str = "") -> str:
    return f"/{name}{'' if place is None else '@' + BOT}{' ' + args if args else ''}"


async def act(g: GroupBot, user: int, place: int | None, action: str) -> None:
    words = {"start": command("start_aiGF", place), "stop": command("stop_aiGF", place),
             "share_on": command("share_private", place, "on"), "share_off": command("share_private", place, "off"),
             "memories": command("memories", place), "forget": command("forget", place, "火锅"),
             "why": command("why", place, "火锅"), "memory_off": command("group_memory", place, "off"),
             "memory_on": command("group_memory", place, "on"), "chatter": "火锅真好吃",
             "say_forget": "忘掉火锅" if place is None else f"@{BOT} 忘掉火锅"}
    if action == "press":
        chat_id = user if place is None else place
        pressable = [m for m in g.tg.sent_messages(chat_id) if g.tg.buttons(m)]
        if pressable:
            data = g.tg.buttons(pressable[-1])[0][1]
            g.tg.push_callback(user, int(pressable[-1]["message_id"]), data, chat_id=chat_id)
            await g.deliver()
        return
    if action == "anonymous" and place is not None:  # an admin posting as the group: nobody's scope
        g.tg.push_group_as(place, f"@{BOT} 想吃火锅了")
        await g.deliver()
        return
    if place is None:
        await g.private(user, words.get(action, "想吃火锅了"))
        return
    if action == "reply":
        answers = [m for m in g.tg.sent_messages(place)]
        if answers:
            await g.group(user, place, "火锅呢", reply_to=int(answers[-1]["message_id"]))
            return
    await g.group(user, place, words.get(action, f"@{BOT} 想吃火锅了"))


def searching_model(body: dict[str, Any]) -> Answer:
    """A model that looks up its memory tool on every first round it is offered, so tool results join
    the requests the property checks."""
    if body.get("tools") and not any(m.get("role") == "tool" for m in body["messages"]):
        return ToolCallAnswer([("search_memories", {"query": "火锅"})])
    return "嗯嗯，我在听呢。"


async def scenario(tmp: Path, steps: list[Step], backend: str = "sqlite") -> None:
    if backend == "postgresql":
        async with pg_schema() as url:
            await run_steps(tmp, steps, database_url=url)
    else:
        await run_steps(tmp, steps)


async def run_steps(tmp: Path, steps: list[Step], database_url: str = "") -> None:
    async with group_bot(tmp, tools=True, database_url=database_url) as g:
        ScriptedBrain(chat=searching_model).install(g.llm)  # type: ignore[arg-type]
        for where in (G1, G2):
            g.tg.add_group(where, admins=(A,))
        for user in USERS:
            g.tg.push_text(user, "/start")  # both can be written to privately
            for place in PLACES:
                scope = Scope(user, place)
                await g.seed(scope, f"喜欢火锅 {token(scope)}", ["火锅"])
                await g.seed(scope, f"吃火锅时说话简短 {token(scope)}", ["火锅"], MemoryType.INSTRUCTION)
        await g.deliver()
        sharing: set[int] = set()
        for user, place, action in steps:
            seen = len(g.llm.requests)
            await act(g, user, place, action)
            if action in ("share_on", "share_off"):
                (sharing.add if action == "share_on" else sharing.discard)(user)
            allowed = {token(Scope(user, place))}
            if place is not None and user in sharing:
                allowed.add(token(Scope(user)))
            for request in g.llm.requests[seen:]:
                found = set(TOKEN.findall(request_text(request)))
                assert found <= allowed, f"step {(user, place, action)} sent {found - allowed} to the model"
            for chat_id in (*USERS, G1, G2):
                owners = {token(Scope(u, chat_id)) for u in USERS} if chat_id < 0 else \
                    {token(Scope(chat_id, p)) for p in PLACES}
                for sent in g.tg.sent_messages(chat_id):
                    found = set(TOKEN.findall(str(sent["text"])))
                    assert found <= owners, f"chat {chat_id} was shown {found - owners}"
        assert {s.user_id for s in await g.engine.active_scopes()} <= set(USERS)  # never the placeholder
        assert await g.engine.pending_count(Scope(g.tg.ANONYMOUS_ADMIN_ID, G1)) == 0


step = st.tuples(st.sampled_from(USERS), st.sampled_from(PLACES), st.sampled_from(ACTIONS))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_no_scope_sees_another_scopes_memories(tmp_path_factory: pytest.TempPathFactory, backend: str,
                                               steps: list[Step]) -> None:
    asyncio.run(scenario(tmp_path_factory.mktemp("isolation"), steps, backend))


def test_the_check_can_fail(tmp_path: Path) -> None:
    """The paths the property watches are live: with sharing on A's private token reaches A's group
    request (counted as B's it would fail); a read tool is never offered in a group (its result could be
    quoted to the group), and in A's private chat the memory tool answers from A's private scope."""

    async def run() -> None:
        async with group_bot(tmp_path, tools=True) as g:
            ScriptedBrain(chat=searching_model).install(g.llm)  # type: ignore[arg-type]
            await g.seed(Scope(A), f"喜欢火锅 {token(Scope(A))}", ["火锅"])
            await g.seed(Scope(A, G1), f"爱吃火锅 {token(Scope(A, G1))}", ["火锅"])
            await g.group(A, G1, f"/start_aiGF@{BOT}")
            await g.group(A, G1, f"/share_private@{BOT} on")
            g.llm.clear()
            await g.group(A, G1, f"@{BOT} 想吃火锅了")
            assert token(Scope(A)) in "\n".join(request_text(r) for r in g.llm.requests)
            assert not any(r.get("tools") for r in g.llm.requests)
            await g.private(A, "/start_aiGF")
            g.llm.clear()
            await g.private(A, "想吃火锅了")
            # The tool round ran, bound to the speaker's private scope.
            tool_said = [str(m.get("content")) for r in g.llm.requests for m in r["messages"]
                         if m.get("role") == "tool"]
            assert tool_said and token(Scope(A)) in tool_said[0] and token(Scope(A, G1)) not in tool_said[0]

    asyncio.run(run())
