"""``make run`` / ``make test`` check their Python before creating anything: a Python older than 3.11 (the
default of common distributions) or none at all is one line naming what is needed and what was found, exit 2,
and no virtualenv is left behind to be reused by the next try."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def make(tmp: Path, python: str, target: str) -> subprocess.CompletedProcess[str]:
    venv = tmp / "venv"
    return subprocess.run(["make", "-s", "-C", str(ROOT), f"{venv}/{target}", f"PYTHON={python}", f"VENV={venv}"],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(("version", "shown"), [("Python 3.10.12", "Python 3.10.12"), (None, "not found")])
@pytest.mark.parametrize("target", [".runtime", ".dev"])  # make run's virtualenv, make test's
def test_a_wrong_python_is_refused_before_anything_is_created(tmp_path: Path, version: str | None,
                                                              shown: str, target: str) -> None:
    python = tmp_path / "python3"
    if version is not None:  # a stand-in for an older Python: it knows its version, fails the 3.11 check
        python.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then echo "{version}"; exit 0; fi\nexit 1\n')
        python.chmod(0o755)
    done = make(tmp_path, str(python), target)
    assert done.returncode == 2
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("make: needs")]
    assert line == f"make: needs Python 3.11 or newer; PYTHON={python} is {shown}"
    assert not (tmp_path / "venv").exists()
