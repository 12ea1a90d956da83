"""The engine installs as a wheel and works from outside the repository, prompts and dictionaries included."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import memory, prompts
from companion.recall.keywords import KeywordExtractor
assert not memory.__file__.startswith({root!r}), memory.__file__
text = prompts.render("extract", today="2025-12-23", known="（无）", turns="用户：我感冒了")
assert "感冒" in text
extractor = KeywordExtractor()
extractor.load()
print(",".join(extractor.keywords("我最近感冒了，一直咳嗽")))
"""


def test_wheel_ships_the_engine_with_prompts_and_dictionaries(tmp_path: Path) -> None:
    # Build from a copy: setuptools writes build/ and *.egg-info beside the sources it builds.
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "requirements.txt", "memory.py"):
        shutil.copy(ROOT / name, source / name)
    for name in ("companion", "prompts"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
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
