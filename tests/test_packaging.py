"""The engine installs as a wheel and works from outside the repository, prompts and dictionaries included;
installed alone into a fresh virtualenv it brings its own dependencies only, none of the bot's."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.fakes import FakeLLM

ROOT = Path(__file__).resolve().parent.parent
# What the Telegram bot, the console and the operator tools need; an engine-only host gets none of it.
NOT_THE_ENGINES = ("aiogram", "pandas", "apscheduler", "prompt_toolkit", "pydantic_settings", "tqdm", "matplotlib")

PROBE = """
import memory, prompts
from companion.recall.keywords import KeywordExtractor
assert not memory.__file__.startswith({root!r}), memory.__file__
text = prompts.render("extract", today="2025-12-23", known="（无）", profile="", turns="用户：我感冒了")
assert "感冒" in text
extractor = KeywordExtractor()
extractor.load()
print(",".join(extractor.keywords("我最近感冒了，一直咳嗽")))
"""

# Run by the fresh virtualenv's Python: remember, recall, a memory tool the model calls (through the real
# openai SDK against the test's fake server), forget; then which of the bot's packages are importable.
ENGINE_ONLY = """
import asyncio, importlib.util, json, sys
from datetime import UTC, datetime

import memory
from companion.core.models import MemoryDraft, MemoryType, Scope, Tier, Validity
from companion.llm.client import LLMClient
from companion.llm.loop import run_tool_loop
from companion.llm.toolkit import Toolset
from companion.recall.keywords import KeywordExtractor

NOW = datetime(2025, 6, 2, 12, 0, tzinfo=UTC)


async def main(base_url: str, db: str) -> dict[str, object]:
    llm = LLMClient(api_key="sk-test", base_url=base_url, model="deepseek-chat", max_retries=0, timeout=20)
    engine = await memory.MemoryEngine.open(f"sqlite:///{db}", memory.EngineConfig(), KeywordExtractor(), llm,
                                            clock=lambda: NOW)
    try:
        await engine.ready()
        alice, bob = Scope(1), Scope(2)
        [peanut] = await engine.remember(alice, [MemoryDraft(
            event="我对花生过敏", keywords=["花生", "过敏"], importance=90, type=MemoryType.FACT,
            tier=Tier.LONG, validity=Validity.PERMANENT)], NOW)
        recalled = [r.memory.id for r in await engine.recall(alice, "花生酱能吃吗", NOW)]
        others = [r.memory.id for r in await engine.recall(bob, "花生酱能吃吗", NOW)]
        answer = await run_tool_loop(llm, [{"role": "user", "content": "记住我下周三搬家"}],
                                     Toolset(engine.tools()(alice)))
        saved = sorted(m.event for m in await engine.memories(alice))
        forgotten = await engine.forget(alice, [peanut])
        after = [r.memory.id for r in await engine.recall(alice, "花生酱能吃吗", NOW)]
    finally:
        await engine.close()
        await llm.close()
    return {"peanut": peanut, "recalled": recalled, "others": others, "answer": answer.text,
            "tool_results": [o.content for o in answer.outcomes], "saved": saved, "forgotten": forgotten,
            "after": after, "memory_file": memory.__file__,
            "importable": [m for m in {absent} if importlib.util.find_spec(m) is not None]}


print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2])), ensure_ascii=False))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources it builds.
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    for path in [ROOT / "pyproject.toml", ROOT / "memory.py", *ROOT.glob("requirements*.txt")]:
        shutil.copy(path, source / path.name)
    for name in ("companion", "prompts"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp / "dist")],
        capture_output=True, text=True, cwd=tmp, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (built,) = (tmp / "dist").glob("*.whl")
    return built


def test_wheel_ships_the_engine_with_prompts_and_dictionaries(wheel: Path, tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"memory.py", "prompts/system.md", "prompts/extract.md", "prompts/profile.md",
            "companion/recall/resources/userdict.txt", "companion/recall/resources/stopwords.txt"} <= names
    assert not any(n.startswith(("handlers/", "tests/", "bench/")) for n in names)

    target = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)  # what an install puts on sys.path, without touching this venv
    probe = subprocess.run(
        [sys.executable, "-c", PROBE.format(root=str(ROOT))],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert probe.returncode == 0, probe.stderr
    assert "感冒" in probe.stdout.split(",")


def test_the_wheel_depends_on_the_engine_and_offers_the_bot_and_the_operator_tools_as_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    requires = [line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist: ")]
    plain = {_name(r) for r in requires if ";" not in r}
    bot = {_name(r) for r in requires if r.endswith('extra == "bot"')}
    ops = {_name(r) for r in requires if r.endswith('extra == "ops"')}
    assert {"aiosqlite", "openai", "pydantic", "jieba", "marisa-trie", "numpy", "sqlite-vec"} <= plain
    assert not plain & {"aiogram", "pandas", "apscheduler", "prompt-toolkit", "pydantic-settings", "tqdm"}
    assert {"aiogram", "apscheduler", "pydantic-settings", "prompt-toolkit", "pandas", "tqdm"} <= bot
    assert ops == {"pandas", "tqdm"}
    assert {"Provides-Extra: bot", "Provides-Extra: ops"} <= set(lines)


def _pins(lines: list[str]) -> set[str]:
    return {pin for pin in (line.split(" #")[0].strip() for line in lines) if pin and not pin.startswith("#")}


def test_requirements_txt_is_the_wheel_and_all_its_extras_with_the_same_pins() -> None:
    """``make run`` installs requirements.txt: it must stay the whole runtime set, pinned as the wheel is."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _pins(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        declared |= _pins(extra)
    listed = _pins((ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines())
    assert listed == declared
    assert set(project["optional-dependencies"]) == {"bot", "ops", "charts", "postgres", "workers"}


def test_the_pin_comparison_sees_a_drift() -> None:
    assert _pins(["numpy~=2.4  # why", "# a comment", ""]) != _pins(["numpy~=2.5"])


async def test_the_engine_alone_in_a_fresh_virtualenv_remembers_recalls_forgets_and_runs_its_tools(
    wheel: Path, fake_llm: FakeLLM, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    await _run(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    # No extras: pip resolves the engine's own dependencies (from the shared pip cache where it can).
    await _run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), timeout=240)
    fake_llm.queue_tool_calls(("save_memory", {"content": "下周三搬家", "tier": "short"}))
    fake_llm.queue_chat("好，记下了：下周三搬家。")
    script = tmp_path / "engine_only.py"
    script.write_text(ENGINE_ONLY.replace("{absent}", repr(NOT_THE_ENGINES)), encoding="utf-8")
    out = await _run(python, str(script), fake_llm.base_url, str(tmp_path / "memory.sqlite3"), cwd=tmp_path,
                     env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    report = json.loads(out)
    assert str(venv) in report["memory_file"]  # the installed engine, not this repository's
    assert report["recalled"] == [report["peanut"]] and report["others"] == []
    [saved] = report["tool_results"]
    # "下周三" is stored as the date it names, in the words and as the tool's ``date``.
    assert json.loads(saved)["saved"]["content"].endswith("（周三）搬家") and json.loads(saved)["saved"]["date"]
    assert report["saved"][0].endswith("（周三）搬家") and report["saved"][1:] == ["我对花生过敏"]
    assert report["answer"] == "好，记下了：下周三搬家。"
    assert report["forgotten"] == 1 and report["after"] == []
    assert report["importable"] == []


async def _run(*argv: str, timeout: float = 120, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=cwd,
        env=None if env is None else {**env, **{k: v for k, v in os.environ.items() if k.startswith("PIP_")}})
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode == 0, f"{argv[:3]} failed:\n{err.decode()[-3000:]}"
    return out.decode()


def _name(requirement: str) -> str:
    for index, char in enumerate(requirement):
        if char in "<>=~!; [":
            return requirement[:index].lower()
    return requirement.lower()
