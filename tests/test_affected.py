"""``make check`` runs the tests of what changed: the selection must reach every test module that imports a
changed module, directly or not, and leave the others out."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.affected import affected, changed_files


@pytest.mark.parametrize(("change", "selected", "left_out"), [
    # a rule at the bottom: its own tests, and a test that reaches it only through the engine
    ("companion/core/followup_rules.py", ["tests/test_followups.py", "tests/test_engine_lifecycle.py"], []),
    # an operator view: its tests, not the recall's
    ("companion/ops/admin/chart.py", ["tests/test_admin.py", "tests/test_logs.py"], ["tests/test_dates.py"]),
    # a test module itself
    ("tests/test_dates.py", ["tests/test_dates.py"], ["tests/test_admin.py"]),
])
def test_a_change_selects_the_tests_that_import_it(change: str, selected: list[str], left_out: list[str]) -> None:
    found = affected([change])
    assert found is not None
    assert set(selected) <= set(found)
    assert not set(left_out) & set(found)


@pytest.mark.parametrize("change", ["tests/conftest.py", "tests/fakes/llm.py", "pyproject.toml",
                                    "requirements-dev.txt", "prompts/context.md", "Makefile"])
def test_what_every_test_stands_on_selects_them_all(change: str) -> None:
    assert affected([change]) is None


def test_a_document_alone_selects_nothing() -> None:
    assert affected(["docs/usage.md", "README.md"]) == []


def test_changed_files_come_from_git_status(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "kept.py").write_text("x = 1\n")
    git("add", "kept.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (tmp_path / "kept.py").write_text("x = 2\n")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "mod.py").write_text("y = 1\n")
    assert sorted(changed_files(tmp_path)) == ["kept.py", "new/mod.py"]
