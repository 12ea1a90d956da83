"""The console offers the chat's memory features with typed choices where Telegram has buttons: receipts
(1 好的, 2 修改, 3 忘掉, 4 撤销), "忘掉……" and ``/forget`` with numbered matches, "全部忘掉" with a typed
confirmation, ``/memories`` pages, ``/why``, ``/stats`` and ``/reset``. Driven as a person would: through
the real ``bot.py console`` on a pipe and in a pseudo-terminal, and in-process for the finer cases, always
against the fake LLM."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from companion.chat import command_table as commands
from companion.chat import texts
from companion.chat.choices import number
from companion.chat.command_table import Place
from companion.core.models import Scope, Status
from companion.hosts.console import HELP, LEARNING, Read, run_console
from tests.fakes import FakeLLM
from tests.process import ROOT, clean_env, console_terminal, run_cli
from tests.scripted import ScriptedBrain, user_words
from tests.support import Rig

ME = Scope(77)
Step = str | Callable[[], None]


def judged(event: str, keywords: list[str], mtype: str = "fact") -> str:
    return json.dumps({"event": event, "keywords": keywords, "type": mtype, "importance": 70, "core": False},
                      ensure_ascii=False)


def scripted(steps: Sequence[Step], out: io.StringIO) -> Read:
    """Types each line (echoed, as a terminal shows it); a callable step runs between lines (the fake
    model's next answer)."""
    pending = list(steps)

    async def read() -> str | None:
        while pending:
            step = pending.pop(0)
            if isinstance(step, str):
                out.write(f"你> {step}\n")
                return step
            step()
        return None

    return read


async def console(rig: Rig, *steps: Step) -> str:
    out = io.StringIO()
    await asyncio.wait_for(run_console(rig.chat, ME, scripted(steps, out), out), 30)
    return out.getvalue()


def after(shown: str, typed: str) -> str:
    """What the console answered to the last time ``typed`` was typed."""
    return shown.rsplit(f"你> {typed}\n", 1)[1].split("你> ", 1)[0]


async def events(rig: Rig, statuses: frozenset[Status] = frozenset({Status.ACTIVE})) -> list[str]:
    return sorted(m.event for m in await rig.engine.memories(ME, statuses))


def env_for(fake_llm: FakeLLM, tmp_path: Path) -> dict[str, str]:
    return clean_env() | {"LLM_API_KEY": "sk-console", "LLM_BASE_URL": fake_llm.base_url,
                          "DATA_DIR": str(tmp_path / "data"), "BACKUP_DIR": str(tmp_path / "backups")}


# ---- the real console, piped and in a terminal -----------------------------------------------------

async def test_piped_console_saves_lists_explains_counts_forgets_and_wipes(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.set_chat_reply("嗯嗯")
    script = ["记住：我每周一去游泳", "1", "/memories", "/why 游泳", "/stats", "记住：我女儿叫小米", "3",
              "/stats", "忘掉每周一那条", "1", "/memories", "记住：我喜欢猫", "/reset", "全部忘掉", "确定", "/stats"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", cwd=tmp_path, env=env_for(fake_llm, tmp_path),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(("\n".join(script) + "\n").encode()), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    answers = out.decode().split("你> ")[1:]  # one per line typed, then the prompt left at the end
    said = dict(zip(range(len(script)), answers, strict=False))
    assert "记住了：我每周一去游泳" in said[0] and "回复 1 好的，2 修改，3 忘掉" in said[0]
    assert said[1].strip() == "小伴> 好的。"
    assert "我记得的关于你的事：" in said[2] and "1. 我每周一去游泳" in said[2]
    assert "“我每周一去游泳”" in said[3] and "你让我记住" in said[3]
    assert "我记得关于你的 1 件事" in said[4]
    assert texts.forgotten(1) in said[6]  # the receipt's 3 forgot the memory just saved
    assert "我记得关于你的 1 件事" in said[7]
    assert "1. 我每周一去游泳" in said[8] and "回复编号" in said[8]
    assert texts.forgotten(1) in said[9]
    assert texts.NO_MEMORIES in said[10]
    assert "好，我们重新开始聊吧" in said[12]
    assert texts.confirm_forget_all(1) in said[13]
    assert texts.forgot_all(1) in said[14]
    assert "我记得关于你的 0 件事" in said[15]
    # Every answer came from the engine: none of these lines reached the model as chat.
    assert fake_llm.chat_requests() == []


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
async def test_terminal_console_forgets_by_number_and_by_receipt(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.set_chat_reply("好呀")
    async with console_terminal(env_for(fake_llm, tmp_path), tmp_path) as term:
        await term.read_until(texts.GREETING_NEW)
        await term.type_until("记住：我每周一去游泳", "3 忘掉")
        await term.type_until("记住：我女儿叫小米", "3 忘掉")
        await term.type_until("3", texts.forgotten(1))
        await term.type_until("忘掉游泳", "取消")
        await term.type_until("第1条", texts.forgotten(1))
        shown = await term.type_until("/memories", texts.NO_MEMORIES)
        while "你>" not in shown.split(texts.NO_MEMORIES, 1)[1]:  # the next prompt is up: Ctrl-D reaches it
            shown = shown + await term.type_until("", "你>", 15)
        term.type(b"\x04")  # Ctrl-D
        await asyncio.wait_for(term.proc.wait(), 15)
    assert term.proc.returncode == 0
    assert fake_llm.chat_requests() == []


@pytest.mark.parametrize("last", ["", "/quit"], ids=["end-of-input", "quit"])
async def test_piped_console_learns_what_was_told_in_passing_before_it_exits(
    fake_llm: FakeLLM, tmp_path: Path, last: str,
) -> None:
    """``bot.py console < chat.txt``: a fact told between small talk, far from the next regular extraction
    and with no news word to extract it at once, is learned by the time the process has exited."""
    brain = ScriptedBrain(facts={"豆豆": {"event": "家里有一只叫豆豆的柯基", "keywords": ["豆豆", "柯基", "狗"],
                                         "importance": 80, "validity": "permanent", "type": "fact"}})
    brain.install(fake_llm)
    env = env_for(fake_llm, tmp_path) | {"EXTRACT_EVERY_MIN": "50", "EXTRACT_EVERY_MAX": "50"}
    script = ["今天天气还不错", "我家有只柯基叫豆豆，特别调皮", "中午随便吃了点面条", "晚上想早点睡", last]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bot.py"), "console", cwd=tmp_path, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    # The input is closed right after its last line, as a file given with ``<`` is.
    _, err = await asyncio.wait_for(proc.communicate(("\n".join(script) + "\n").encode()), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert "Traceback" not in err.decode(), err.decode()[-2000:]
    assert len(fake_llm.chat_requests()) == 4  # every line was chat, answered before the input ended
    code, listing, err_listing = await run_cli(env, tmp_path, "memories", "1")
    assert code == 0, err_listing
    assert "家里有一只叫豆豆的柯基" in listing


# ---- in-process: the finer cases ---------------------------------------------------------------------

async def test_a_stale_number_is_chat_once_something_else_was_said(rig: Rig) -> None:
    rig.llm.set_chat_reply("嗯")
    shown = await console(rig, "记住：我每周一去游泳", "今天好累", "3", "忘掉游泳", "你在吗", "1")
    assert await events(rig) == ["我每周一去游泳"]
    assert [user_words(r["messages"][-1]["content"]) for r in rig.llm.chat_requests()] == ["今天好累", "3", "你在吗",
                                                                                          "1"]
    assert texts.forgotten(1) not in shown


async def test_cancel_and_out_of_range_keep_the_memories(rig: Rig) -> None:
    shown = await console(rig, "记住：我每周一去游泳", "忘掉游泳", "7", "取消", "全部忘掉", "取消", "/forget all",
                          "/stats", "确定")
    assert "没有第 7 条" in after(shown, "7")
    assert after(shown, "取消") .strip() == "小伴> " + texts.CANCELLED
    assert await events(rig) == ["我每周一去游泳"]  # the command in between let the confirmation lapse
    assert rig.llm.chat_requests() != []  # "确定" after /stats was chat


async def test_receipt_edit_and_undo_by_number(rig: Rig) -> None:
    rig.llm.set_chat_reply("嗯")
    shown = await console(
        rig,
        lambda: rig.llm.set_json_reply(judged("我对花生过敏", ["花生", "过敏"])), "记住：我对花生过敏",
        lambda: rig.llm.set_json_reply(judged("我花生过敏", ["花生", "过敏"])), "记住：我花生过敏",
        "4",
        "修改",
        lambda: rig.llm.set_json_reply(judged("我对坚果过敏", ["坚果", "过敏"])), "我对坚果过敏")
    assert "4 撤销" in after(shown, "记住：我花生过敏")
    assert "已撤销，还是原来的：我对花生过敏" in after(shown, "4")
    assert after(shown, "修改").strip() == "小伴> " + texts.EDIT_PROMPT
    assert "改好了：我对坚果过敏" in after(shown, "我对坚果过敏")
    assert await events(rig) == ["我对坚果过敏"]


async def test_memories_pages_archive_and_restore_by_typing(rig: Rig) -> None:
    now = rig.clock()
    for i in range(7):
        rig.llm.set_json_reply(judged(f"第{i}件小事：喜欢颜色{i}", [f"颜色{i}"]))
        await rig.engine.save_said(ME, f"第{i}件小事：喜欢颜色{i}", now)
    shown = await console(rig, "/memories", "n", "p", "归档 1", "a", "恢复 1", "b", "a")
    assert "（第 1/2 页）" in after(shown, "/memories") and "n 下一页" in after(shown, "/memories")
    assert "（第 2/2 页）" in after(shown, "n") and "p 上一页" in after(shown, "n")
    assert "（第 1/2 页）" in after(shown, "p")
    first = after(shown, "/memories").split("1. ", 1)[1].split("\n", 1)[0]
    assert f"已归档：{first}" in after(shown, "归档 1")
    assert "已恢复：" + first in after(shown, "恢复 1")
    assert texts.NO_MEMORIES not in after(shown, "恢复 1") and texts.NO_ARCHIVED in after(shown, "恢复 1")
    assert f"已归档的记忆（不会在聊天中被想起，可以恢复）：\n1. {first}\n" in shown
    assert "我记得的关于你的事" in after(shown, "b") and f". {first}\n" in after(shown, "b")
    assert texts.NO_ARCHIVED in after(shown, "a")
    assert len(await events(rig)) == 7 and await events(rig, frozenset({Status.ARCHIVED})) == []


async def test_forget_command_lists_numbered_matches(rig: Rig) -> None:
    rig.llm.set_json_reply(judged("我每周一去游泳", ["游泳", "周一"]))
    await rig.engine.save_said(ME, "我每周一去游泳", rig.clock())
    shown = await console(rig, "/forget 游泳", "第一条", "/forget", "/forget 篮球", "/why", "/why 篮球")
    assert "1. 我每周一去游泳" in after(shown, "/forget 游泳")
    assert texts.forgotten(1) in after(shown, "第一条")
    assert "用法：/forget" in after(shown, "/forget")
    assert texts.nothing_found("篮球") in after(shown, "/forget 篮球")
    assert "用法：/why" in after(shown, "/why")
    assert await events(rig) == []


async def test_a_model_down_at_the_end_leaves_the_turns_queued_and_the_console_ends(
    rig: Rig, caplog: pytest.LogCaptureFixture,
) -> None:
    rig.llm.set_chat_reply("嗯")
    shown = await console(rig, "我家有只柯基叫豆豆", "今天好累", lambda: rig.llm.fail_next(5, status=503))
    assert shown.rstrip().endswith(LEARNING)
    assert await rig.engine.pending_count(ME) == 2  # the next run, or the bot's nightly decay, extracts them
    assert "could not learn the console's last turns" in caplog.text
    assert await events(rig) == []


@pytest.mark.parametrize(("typed", "chosen"), [
    ("1", 1), ("第1条", 1), ("第 2 个", 2), ("第三条", 3), ("两", 2), ("10。", 10),
    ("1点", None), ("十一", None), ("第", None), ("一会儿", None), ("", None),
])
def test_a_typed_choice_number(typed: str, chosen: int | None) -> None:
    assert number(typed) == chosen


@pytest.mark.parametrize("name", [r.name for r in commands.rows(Place.CONSOLE) if r.name not in {"help", "quit"}])
async def test_every_console_row_is_answered_by_its_own_command(rig: Rig, name: str) -> None:
    shown = await console(rig, f"/{name}")
    assert HELP not in after(shown, f"/{name}")
    assert rig.llm.chat_requests() == []
