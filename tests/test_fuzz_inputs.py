"""Proof 5, fuzzing with hypothesis: message text, command arguments, callback data, the model's JSON,
tool-call arguments and restore files. Each input gets a clear error or safe handling: no exception
escapes, no SQL error, no change to another user's rows. The example count is bounded for ``make test``;
``make stress`` raises it (``FUZZ_EXAMPLES``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from companion.chat import texts
from companion.core.csvformat import HEADERS
from companion.core.errors import LLMBadResponseError, LLMError, RestoreError
from companion.core.extraction import parse_extraction
from companion.core.models import Memory, MemoryDraft, Scope, Validity
from companion.llm.client import ToolCall
from companion.llm.toolkit import Tool, Toolset
from companion.ops.backup.restore import read_backup_csv
from tests.fakes.base import WAIT_SCALE
from tests.support import USER, Live, Rig

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES < 100,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
OTHER = 6262
NESTED = "[" * 100_000 + "]" * 100_000

SPECIAL_TEXT = st.sampled_from([
    "", " ", "\n\t", "好" * 4096, "a" * 4096, "😀" * 2048, "مرحبا كيف حالك שלום", "\u200b\u200c\u200d\ufeff\u2060",
    "a\x00b\x00", "'; DROP TABLE mem_u6262; --", '" OR 1=1 --', "mem_u6262", "*bold* _it_ [x](http://e.com) `c`",
    "<b>hi</b><script>alert(1)</script>&amp;", "\\ % _ %s {0} ${x}", "\U0010ffff",
])
MESSAGE_TEXT = st.one_of(SPECIAL_TEXT, st.text(max_size=300),
                         st.text(alphabet=st.characters(codec="utf-8"), max_size=50))
JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                      st.text(max_size=40))
ANY_JSON = st.recursive(JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                          st.dictionaries(st.text(max_size=10), inner, max_size=5)),
                        max_leaves=30)
MEMORY_ITEM = st.fixed_dictionaries({}, optional={
    "event": st.one_of(MESSAGE_TEXT, ANY_JSON), "keywords": st.one_of(st.lists(st.text(max_size=20)), ANY_JSON),
    "importance": st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=5), ANY_JSON),
    "validity": st.one_of(st.sampled_from(["7d", "30d", "permanent", "", "-1d"]), ANY_JSON),
    "type": st.one_of(st.sampled_from(["event", "fact", "preference", "instruction"]), ANY_JSON),
    "handle": ANY_JSON, "core": ANY_JSON,
})
LLM_JSON = st.one_of(
    st.sampled_from([NESTED, '{"memories": ' + NESTED + "}", '{"memories": [' + '{"event": "x"},' * 30000 + "{}]}",
                     '{"memories": [{"event": "' + "长" * 1_000_000 + '"}]}', "NaN", "[]", "null", '"memories"',
                     "```json\n{\"memories\": []}\n```", '{"memories": [{"event": "x", "importance": -1e308}]}']),
    ANY_JSON.map(lambda v: json.dumps(v)),
    st.lists(MEMORY_ITEM, max_size=4).map(lambda items: json.dumps({"memories": items}, default=str)),
)


def _log_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    """ERROR records of this example, with their exception (clears the capture for the next example:
    hypothesis runs every example inside one test function)."""
    found = [f"{r.getMessage()}: {r.exc_info[1]!r}" if r.exc_info else r.getMessage()
             for r in caplog.records if r.levelno >= logging.ERROR]
    caplog.clear()
    return found


async def _seed_other(rig: Rig) -> list[Memory]:
    scope = Scope(OTHER)
    if not await rig.engine.memories(scope):
        await rig.engine.remember(scope, [MemoryDraft("别人的秘密：对花生过敏", ["花生", "过敏"], 80.0,
                                                      validity=Validity.PERMANENT)], rig.clock())
    return await rig.engine.memories(scope)


@FUZZ
@given(text=MESSAGE_TEXT)
async def test_any_message_text_gets_a_reply(rig: Rig, text: str, caplog: pytest.LogCaptureFixture) -> None:
    _log_errors(caplog)  # start each example with an empty capture
    before = await _seed_other(rig)
    reply = await rig.chat.reply(Scope(USER), text)
    assert isinstance(reply.text, str) and reply.text.strip()
    assert reply.text != texts.INTERNAL_ERROR
    assert await rig.engine.memories(Scope(OTHER)) == before
    assert not _log_errors(caplog)


@FUZZ
@given(raw=LLM_JSON)
def test_extraction_json_is_parsed_or_refused(raw: str) -> None:
    try:
        drafts = parse_extraction(raw, lambda s: s.split(), "2025-12-23")
    except LLMBadResponseError:
        return
    for draft in drafts:
        assert isinstance(draft.event, str) and draft.event.strip()
        assert 0 <= draft.importance <= 100 and draft.importance == draft.importance
        assert all(isinstance(k, str) for k in draft.keywords)


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=LLM_JSON)
async def test_model_json_through_the_engine(rig: Rig, raw: str, caplog: pytest.LogCaptureFixture) -> None:
    """Extraction, explicit saving and the profile all take the fuzzed answer from the real client."""
    _log_errors(caplog)  # start each example with an empty capture
    before = await _seed_other(rig)
    scope = Scope(USER)
    rig.llm.set_json_reply(raw)
    await rig.chat.reply(scope, "我昨天感冒发烧了")
    for call in (lambda: rig.engine.consolidate(scope, rig.clock()),
                 lambda: rig.engine.save_explicit(scope, "记住我喜欢猫", rig.clock()),
                 lambda: rig.engine.refresh_profile(scope, rig.clock(), force=True)):
        with contextlib.suppress(LLMError):
            await call()
    assert await rig.engine.memories(Scope(OTHER)) == before
    assert not _log_errors(caplog)


@FUZZ
@given(arguments=st.one_of(ANY_JSON.map(json.dumps), st.text(max_size=50), st.sampled_from(
    ['{"handle": 1}', '{"handle": -1}', '{"handle": 99999999999999999999999}', '{"handle": "1; DROP TABLE x"}',
     '{"handle": 1, "user_id": 6262}', '{"handle": null}', "{", "[]", NESTED])))
async def test_tool_arguments_never_raise(rig: Rig, arguments: str) -> None:
    before = await _seed_other(rig)
    scope = Scope(USER)

    async def forget_memory(handle: int) -> dict[str, object]:
        """Forget one memory of this user.

        Args:
            handle: the memory's handle.
        """
        return {"forgotten": await rig.engine.forget(scope, [handle])}

    outcome = await Toolset([Tool.function(forget_memory)]).dispatch(ToolCall("c1", "forget_memory", arguments))
    assert isinstance(outcome.content, str)
    assert await rig.engine.memories(Scope(OTHER)) == before


ROW = [("1", "2025-12-23 感冒", "感冒", "80", "2025-12-23 10:00:00", "30d", "")]
CELL = st.one_of(st.sampled_from(["=1+1", "+SUM(A1)", "-2", "@cmd", "\tx", "\rx", "'quoted", "", "1e309", "NaN",
                                  "-5", "9" * 40, "2025-13-45 99:99", "permanent（永久）", "x" * 100_000]),
                 st.text(max_size=30))


@FUZZ
@given(data=st.data(), kind=st.sampled_from(["cells", "header", "gbk", "truncated", "bytes"]))
def test_restore_files_give_a_clear_error(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject,
                                          kind: str) -> None:
    path = tmp_path_factory.mktemp("restore") / "u42.csv"
    header = list(HEADERS[:7])
    if kind == "header":
        header = data.draw(st.lists(st.text(max_size=8), max_size=8))
    rows = [[data.draw(CELL) for _ in header] for _ in range(data.draw(st.integers(0, 3)))]
    text = "\n".join(",".join(json.dumps(c, ensure_ascii=False) for c in row) for row in [header, *rows])
    raw = text.encode("gbk", errors="replace") if kind == "gbk" else ("\ufeff" + text).encode("utf-8")
    if kind == "truncated":
        raw = raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))]
    if kind == "bytes":
        raw = data.draw(st.binary(max_size=300))
    path.write_bytes(raw)
    try:
        backup = read_backup_csv(path)
    except RestoreError as exc:
        assert str(exc).startswith("u42.csv"), str(exc)
        return
    for memory in backup.memories:
        assert isinstance(memory.event, str)


COMMANDS = ["/memories", "/forget", "/why", "/stats", "/start", "/remember"]


@settings(max_examples=max(EXAMPLES // 2, 8), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(command=st.sampled_from(COMMANDS), argument=st.one_of(SPECIAL_TEXT, st.text(max_size=40)))
async def test_command_arguments(live: Live, command: str, argument: str, caplog: pytest.LogCaptureFixture) -> None:
    _log_errors(caplog)  # start each example with an empty capture
    before = await _seed_other(live.rig)
    if not live.tg.sent_messages(USER):
        await live.say("/start_aiGF", 1)
    count = len(live.tg.sent_messages(USER))
    text = f"{command} {argument}"[:4096]
    if not text.strip(" ") or len(text.encode("utf-16-le")) // 2 > 4096:
        return
    answer = await live.say(text, count + 1)
    assert answer != texts.INTERNAL_ERROR
    assert await live.rig.engine.memories(Scope(OTHER)) == before
    assert not _log_errors(caplog)


def _forged(handle: int) -> st.SearchStrategy[str]:
    h = str(handle)
    return st.sampled_from([
        f"m:forget:{h}:0", f"m:archive:{h}:0", f"m:promote:{h}:0", f"m:edit:{h}:0", f"f:one:{h}:0", "f:all:0:999",
        f"r:forget:{h}:0:::", f"r:undo:{h}:0:long:0:forget", "p:-1::0", "p:99999999999999999999::1", "m:forget:x:0",
        "m::::::", "s:on", "s:off", "f", ":", "", "x" * 64, "m:forget:1:0:extra", "r:promote:" + h + ":a:b:c:d",
    ])


@settings(max_examples=max(EXAMPLES, 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_callback_data_forged_or_malformed(live: Live, data: st.DataObject,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    _log_errors(caplog)  # start each example with an empty capture
    before = await _seed_other(live.rig)
    if not live.tg.sent_messages(USER):
        await live.say("/start_aiGF", 1)
    target = live.tg.sent_messages(USER)[0]
    payload = data.draw(st.one_of(_forged(before[0].id), st.text(max_size=64)))
    answers = len(live.tg.callback_answers)
    live.tg.push_callback(USER, int(target["message_id"]), payload)
    # Either the bot answers the press or ignores data no filter accepts; give it the time of one round trip, not
    # the stretched bound of a stuck bot (WAIT_SCALE): most drawn presses are ignored, and each would wait it out.
    with contextlib.suppress(AssertionError):
        await live.tg.wait_for_callback_answers(answers + 1, timeout=0.5 / WAIT_SCALE)
    assert await live.rig.engine.memories(Scope(OTHER)) == before
    assert texts.INTERNAL_ERROR not in [m["text"] for m in live.tg.sent_messages(USER)]
    assert not _log_errors(caplog)


async def test_start_button_pressed_twice(live: Live, caplog: pytest.LogCaptureFixture) -> None:
    """Found by the callback fuzzer: a second press on the start button failed on "message is not modified"."""
    await live.say("/start", 1)
    greeting = live.tg.sent_messages(USER)[0]
    for _ in range(2):
        live.tg.push_callback(USER, int(greeting["message_id"]), "s:on")
    await live.tg.wait_for_callback_answers(2)
    await live.tg.wait_for_messages(USER, 3)
    assert not _log_errors(caplog)
