"""The virtualenvs real AstrBot runs in, built by a builder process of their own (this file run as a
script) so a pytest session can start them while its other tests run.

A virtualenv is ready once its ``.ready-<hash>`` stamp (the pin and the plugin's requirements) exists;
a change of either builds it again. The builder holds ``<venv>.lock`` while it works, so two builders
(two pytest runs, or a session's background build and a direct call) never write one virtualenv at once:
the second waits and finds the stamp. Only the standard library is imported: the builder runs outside
the session, from the project's Python."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "companion" / "hosts" / "astrbot" / "requirements.txt"
ASTRBOT = "astrbot==4.14.6"  # the newest AstrBot for Python 3.11
NEWEST = "astrbot==4.29.3"  # the newest AstrBot when the plugin was written (Python >= 3.12)
PIP_TIMEOUT = 1800
# Outside the clone, keyed by the pin, so every clone on a machine (CI's fresh ones too) builds each once.
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "companion-memory-tests"
TAIL_LINES = 30


def python312() -> str | None:
    """A Python 3.12 interpreter under pyenv or on PATH, for the newest AstrBot. A pyenv shim is no
    interpreter: it runs only where pyenv's selected versions include 3.12, which a test cannot rely on."""
    pyenv = sorted(Path.home().glob(".pyenv/versions/3.12*/bin/python"))
    if pyenv:
        return str(pyenv[-1])
    found = shutil.which("python3.12")
    return found if found and "/shims/" not in found else None


@dataclass(frozen=True)
class Venv:
    """One AstrBot virtualenv: where it lives, the AstrBot it holds and the interpreter it is made from."""

    path: Path
    pin: str
    base: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> Path:
        text = f"{self.pin}\n{REQUIREMENTS.read_text(encoding='utf-8')}"
        return self.path / f".ready-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    @property
    def lock(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    @property
    def log(self) -> Path:
        # One per pytest-xdist worker: each worker's builder writes its own (the second waits on the lock).
        return self.path.with_name(f"{self.path.name}.{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.log")


def pinned() -> Venv:
    """The virtualenv of the pinned AstrBot, which most tests run in (``ASTRBOT_VENV`` moves it)."""
    return Venv(Path(os.environ.get("ASTRBOT_VENV") or CACHE / f"astrbot-{ASTRBOT.partition('==')[2]}"), ASTRBOT,
                sys.executable)


def newest() -> Venv | None:
    """The virtualenv of the newest AstrBot, when there is a Python 3.12 to make it from."""
    base = python312()
    return None if base is None else Venv(CACHE / f"astrbot-{NEWEST.partition('==')[2]}-py312", NEWEST, base)


def build(venv: Venv) -> None:
    """Make ``venv`` unless it is ready, under its lock; the last line printed on failure names the cause."""
    began = time.monotonic()
    venv.path.parent.mkdir(parents=True, exist_ok=True)
    with venv.lock.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if venv.ready.exists():
            print(f"{venv.path.name} ({venv.pin}) is ready (built before, or by another worker)", flush=True)
            return
        steps = (
            ("venv", [venv.base, "-m", "venv", str(venv.path)]) if not venv.python.exists() else None,
            # --no-compile: most of AstrBot's dependencies are never imported by the tests, and compiling them
            # all to bytecode was most of the build's CPU; Python compiles what a run imports as it imports it.
            ("pip install", [str(venv.python), "-m", "pip", "install", "--progress-bar", "off", "--no-compile",
                             venv.pin, "-r", str(REQUIREMENTS)]),
        )
        for name, command in filter(None, steps):
            try:
                code = subprocess.run(command, timeout=PIP_TIMEOUT, check=False).returncode
            except subprocess.TimeoutExpired:
                sys.exit(f"{name} for {venv.pin} took over {PIP_TIMEOUT} s")
            if code:
                sys.exit(f"{name} for {venv.pin} exited with {code}")
        venv.ready.touch()
        print(f"built {venv.path.name} ({venv.pin}) in {time.monotonic() - began:.0f} s", flush=True)


@dataclass
class Build:
    """A builder process making one virtualenv, and how long the session waited for it."""

    venv: Venv
    process: subprocess.Popen[bytes]
    waited: float | None = None

    @classmethod
    def start(cls, venv: Venv) -> Build:
        venv.path.parent.mkdir(parents=True, exist_ok=True)
        with venv.log.open("wb") as log:
            # A session of its own, so stopping it stops pip and whatever pip runs.
            process = subprocess.Popen([sys.executable, __file__, str(venv.path), venv.pin, venv.base],
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       cwd=ROOT, start_new_session=True)
        return cls(venv, process)

    def wait(self) -> Path:
        """The virtualenv's Python once the build is done; an error naming the cause when it failed."""
        began = time.monotonic()
        code = self.process.wait()
        if self.waited is None:
            self.waited = time.monotonic() - began
        if code == 0 and self.venv.ready.exists():
            return self.venv.python
        lines = self.output()
        raise RuntimeError(f"AstrBot virtualenv {self.venv.path} ({self.venv.pin}) was not built: {lines[-1]}"
                           f"; the last lines of {self.venv.log}:\n" + "\n".join(lines[-TAIL_LINES:]))

    def stop(self) -> None:
        """End a build nobody waited for (the session stopped before the AstrBot tests)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait()

    def summary(self) -> str:
        """The builder's last line (built in how long, or why not) and how long the tests waited for it."""
        waited = "not waited for" if self.waited is None else f"the tests waited {self.waited:.0f} s for it"
        return f"AstrBot virtualenv in the background: {self.output()[-1]}; {waited}"

    def output(self) -> list[str]:
        return self.venv.log.read_text(encoding="utf-8", errors="replace").splitlines() or ["(no output)"]


# The builds this session started, by virtualenv: a later call waits for the one already running.
BUILDS: dict[Path, Build] = {}


def start(venv: Venv) -> Build | None:
    """Start building ``venv`` unless it is ready or already being built by this session."""
    if venv.path not in BUILDS and not venv.ready.exists():
        BUILDS[venv.path] = Build.start(venv)
    return BUILDS.get(venv.path)


def python_of(venv: Venv) -> Path:
    """The Python of ``venv``, waiting for its build (started now when none is running)."""
    running = start(venv)
    return venv.python if running is None else running.wait()


class Test(Protocol):
    """What ordering needs of a collected test: a ``pytest.Item``'s path, and the fixtures it takes when
    it has any (a ``pytest.Function`` has them, an ``Item`` of another plugin may not)."""

    @property
    def path(self) -> Path: ...


def fixtures(test: Test) -> Collection[str]:
    names: Collection[str] = getattr(test, "fixturenames", ())
    return names


T = TypeVar("T", bound=Test)
HERE = Path(__file__).resolve().parent
# The fixtures that hand a test an AstrBot virtualenv's Python, and the virtualenv each one waits for.
FIXTURES: dict[str, Callable[[], Venv | None]] = {"astrbot_python": pinned, "newest_python": newest}


def runs_astrbot(test: Test) -> bool:
    """Whether ``test`` runs real AstrBot: it is under tests/astrbot/ or takes a virtualenv's fixture."""
    return test.path.resolve().is_relative_to(HERE) or not FIXTURES.keys().isdisjoint(fixtures(test))


def astrbot_last(tests: Iterable[T]) -> list[T]:
    """``tests`` with the AstrBot ones moved to the end, each part in its order (the sort is stable), so
    the virtualenvs build while the others run."""
    return sorted(tests, key=runs_astrbot)


def wanted(tests: Iterable[Test]) -> list[Venv]:
    """The virtualenvs ``tests`` wait for (the newest AstrBot's only when there is a Python 3.12)."""
    names = {name for test in tests for name in fixtures(test)}
    return [venv for name, make in FIXTURES.items() if name in names and (venv := make()) is not None]


if __name__ == "__main__":
    build(Venv(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
