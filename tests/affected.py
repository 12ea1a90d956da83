"""``python -m tests.affected``: the test modules a change can break, for ``make check``.

A change is what ``git status`` lists (staged, unstaged and new files). A test module is affected when it is
changed itself or imports, directly or through other project modules, a changed module. A change to what every
test stands on (``tests/conftest.py``, the fakes, the support modules, ``pyproject.toml``, the requirements or
the Makefile) or to a prompt or dictionary (read as a resource, not imported) affects them all. Prints one
path a line; ``--all`` when everything is affected; nothing when no Python file changed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("bot.py", "memory.py", "companion", "handlers", "prompts", "bench", "tests")
# What every test stands on: a change here is a change under every test.
EVERYTHING = ("tests/conftest.py", "tests/fakes/", "tests/support", "tests/pgtest.py", "tests/redistest.py",
              "pyproject.toml", "requirements", "Makefile", "prompts/", "companion/recall/resources/")


def changed_files(root: Path = ROOT) -> list[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    # "XY path" or "XY old -> new" for a rename: the new path is what exists now.
    return [line[3:].split(" -> ")[-1].strip('"') for line in out.splitlines() if line.strip()]


def module_of(path: str) -> str | None:
    if not path.endswith(".py"):
        return None
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = root / name
        files.extend([path] if path.is_file() else sorted(path.rglob("*.py")))
    return [f for f in files if ".venv" not in f.parts]


def imported(path: Path) -> set[str]:
    """Every module name an import in ``path`` may mean: ``from a.b import c`` is ``a.b`` or ``a.b.c``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def affected(changed: Iterable[str], root: Path = ROOT) -> list[str] | None:
    """The test modules ``changed`` can break, sorted; None for all of them."""
    changed = list(changed)
    if any(path.startswith(EVERYTHING) for path in changed):
        return None
    files = python_files(root)
    modules = {name: f for f in files if (name := module_of(str(f.relative_to(root)))) is not None}
    importers: dict[str, set[str]] = {}
    for name, path in modules.items():
        for target in imported(path):
            # A package's import reaches its ``__init__``; the modules it names are listed on their own.
            while target:
                if target in modules:
                    importers.setdefault(target, set()).add(name)
                target = target.rpartition(".")[0]
    reached = {m for m in map(module_of, changed) if m is not None and m in modules}
    todo = list(reached)
    while todo:
        for importer in importers.get(todo.pop(), ()):
            if importer not in reached:
                reached.add(importer)
                todo.append(importer)
    tests = {str(modules[m].relative_to(root)) for m in reached}
    return sorted(t for t in tests if Path(t).name.startswith("test_"))


def main(argv: list[str]) -> int:
    found = affected(changed_files())
    print("--all" if found is None else "\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
