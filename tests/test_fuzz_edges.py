"""More fuzzing (hypothesis; part of ``make stress`` with ``FUZZ_EXAMPLES``): NUL characters and lone
surrogates in messages and commands through the fake Telegram server, and huge or cut-off model replies
through the real openai SDK. The bot answers safely (never the generic error, no ERROR log) and nothing
stored is lost: another user's memories stay, and a turn whose reply failed is kept for memory."""

from __future__ import annotations

import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.chat import texts
from companion.chat.pipeline import REPLY_MAX_CHARS
from companion.core.models import MemoryDraft, Scope, Validity
from companion.core.text import sendable
from tests.support import USER, Live, Rig

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES < 100,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
OTHER = 6262
BAD = st.sampled_from(["\x00", "\ud800", "\udfff", "\ud83d", "\ude00", "\x00\x00", "\ud800\x00"])
PIECE = st.one_of(BAD, st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x4E80), max_size=5),
                  st.text(max_size=5), st.sampled_from(["记住：", "忘掉", " ", "@", ":"]))
DIRTY = st.lists(PIECE, min_size=1, max_size=8).map("".join).filter(
    lambda t: any(c in t for c in "\x00\ud800\udfff\ud83d\ude00"))
COMMANDS = ["", "/memories ", "/forget ", "/why ", "/stats ", "/remember ", "/weekly "]


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    caplog.clear()
    return found


async def _other(rig: Rig) -> list[object]:
    scope = Scope(OTHER)
    if not await rig.engine.memories(scope):
        await rig.engine.remember(scope, [MemoryDraft("别人的秘密：对花生过敏", ["花生"], 80.0,
                                                      validity=Validity.PERMANENT)], rig.clock())
    return list(await rig.engine.memories(scope))


@FUZZ
@given(command=st.sampled_from(COMMANDS), text=DIRTY)
async def test_nul_and_lone_surrogates_in_messages_and_commands(
    live: Live, command: str, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    _errors(caplog)
    before = await _other(live.rig)
    if not live.tg.sent_messages(USER):
        await live.say("/start_aiGF", 1)
    said = (command + text) if command else text
    if not said.strip() or (said.startswith("/") and not command):
        return
    answer = await live.say(said, len(live.tg.sent_messages(USER)) + 1)
    assert answer != texts.INTERNAL_ERROR
    assert not any(0xD800 <= ord(c) <= 0xDFFF for c in answer)
    assert await live.rig.engine.memories(Scope(OTHER)) == before
    for memory in await live.rig.engine.memories(Scope(USER)):  # whatever was saved is storable text
        memory.event.encode()
    assert not _errors(caplog)


@FUZZ
@given(text=DIRTY)
async def test_dirty_text_through_the_pipeline(rig: Rig, text: str, caplog: pytest.LogCaptureFixture) -> None:
    _errors(caplog)
    scope = Scope(USER)
    reply = await rig.chat.reply(scope, text)
    assert reply.ok and reply.text.strip()
    for turn in await rig.engine.recent_turns(scope, 20):
        turn.user.encode()
    assert not _errors(caplog)


@settings(max_examples=max(EXAMPLES // 2, 6), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(size=st.sampled_from([4097, 20_000, 1_000_000]), piece=st.sampled_from(["好", "a", "😀", "长句子。\n"]))
async def test_huge_model_reply(live: Live, size: int, piece: str, caplog: pytest.LogCaptureFixture) -> None:
    """A broken endpoint's megabyte answer is bounded: a few Telegram messages, never hundreds."""
    _errors(caplog)
    if not live.tg.sent_messages(USER):
        await live.say("/start_aiGF", 1)
    before = len(live.tg.sent_messages(USER))
    live.llm.queue_chat((piece * size)[:size])
    await live.say("讲个很长的故事", before + 1)
    await live.rig.chat.drain()
    sent = live.tg.sent_messages(USER)[before:]
    assert 1 <= len(sent) <= 4 and sum(len(str(m["text"])) for m in sent) <= REPLY_MAX_CHARS + 10
    assert not _errors(caplog)


@settings(max_examples=max(EXAMPLES // 2, 6), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(keep=st.floats(min_value=0.0, max_value=0.99), size=st.sampled_from([10, 5000, 200_000]))
async def test_cut_off_model_reply(rig: Rig, keep: float, size: int, caplog: pytest.LogCaptureFixture) -> None:
    """The connection drops mid-body: the user is told, and what they said stays queued for memory."""
    _errors(caplog)
    scope = Scope(USER)
    await rig.chat.drain()  # no background call of an earlier example may take the cut
    queued = await rig.engine.pending_count(scope)
    rig.llm.queue_chat("好" * size)
    rig.llm.cut_next(keep=keep)
    reply = await rig.chat.reply(scope, "今天天气不错")
    assert not reply.ok and reply.text == texts.LLM_DOWN
    assert await rig.engine.pending_count(scope) == queued + 1  # kept for memory
    assert (await rig.chat.reply(scope, "还在吗")).ok  # the next call works
    await rig.chat.drain()
    assert not _errors(caplog)


@pytest.mark.parametrize(("raw", "expected"), [
    ("好\ud800坏", "好\ufffd坏"),
    ("\udfff", "\ufffd"),
    ("a\x00b", "a\ufffdb"),  # NUL: PostgreSQL's text refuses it, so no backend gets it
    ("😀 表情", "😀 表情"),  # a whole pair is one character in Python: kept
    ("plain", "plain"),
])
def test_sendable(raw: str, expected: str) -> None:
    assert sendable(raw) == expected
    sendable(raw).encode()
