"""No two modules share a name, so a name says which module it is (in a traceback, a search, an import):
the one exception is the two storage backends, which mirror each other file for file."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("companion", "handlers")
MIRRORS = frozenset({ROOT / "companion" / "storage" / "sqlite", ROOT / "companion" / "storage" / "postgres"})


def modules() -> list[Path]:
    found = [ROOT / "bot.py", ROOT / "memory.py"]
    for folder in SOURCES:
        found += [p for p in (ROOT / folder).rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts]
    return found


def repeated(paths: list[Path]) -> dict[str, list[str]]:
    """Each module name worn by more than one module, a backend's mirror of the other backend's aside."""
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        by_name[path.stem].append(path)
    clashes: dict[str, list[str]] = {}
    for name, places in by_name.items():
        outside = [p for p in places if p.parent not in MIRRORS]
        if len(outside) > 1 or (outside and len(places) > 1):
            clashes[name] = sorted(p.relative_to(ROOT).as_posix() for p in places)
    return clashes


def test_no_two_modules_share_a_name() -> None:
    assert repeated(modules()) == {}


def test_the_rule_sees_a_clash_and_lets_the_backends_mirror() -> None:
    sqlite, postgres = sorted(MIRRORS, key=str, reverse=True)
    mirrored = [sqlite / "store.py", postgres / "store.py"]
    assert repeated(mirrored) == {}
    clash = [ROOT / "companion" / "chat" / "texts.py", ROOT / "companion" / "kanban" / "texts.py"]
    assert repeated(clash) == {"texts": ["companion/chat/texts.py", "companion/kanban/texts.py"]}
    beside = [sqlite / "decay.py", ROOT / "companion" / "core" / "decay.py"]
    assert repeated(beside) == {"decay": ["companion/core/decay.py", "companion/storage/sqlite/decay.py"]}
