"""Imports point down only: each module may import its own package and the layers below it.

The layer map is docs/architecture.md ("Layers") in code; a new package must be placed here. Database
drivers stay in companion/storage, and its PostgreSQL backend loads nothing of SQLite's.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lower number = lower layer. Packages on the same layer may not import each other. The fractions order the
# parts of companion/ops between the engine API and the layers above it.
LAYERS: dict[str, float] = {
    "companion.core": 0,
    "companion.config": 1,
    "companion.storage": 1,
    "companion.recall": 1,
    "companion.llm": 1,
    "prompts": 1,
    "companion.engine": 2,
    "memory": 3,
    "companion.chat": 4,
    "companion.ops": 4,  # the composition helpers: engine_assembly, operator_commands
    "companion.ops.preflight": 3.3,  # start-up checks; the workers raise its StartupError
    "companion.ops.backup": 3.3,
    "companion.ops.admin": 3.6,
    "companion.ops.jobs": 3.6,
    "companion.ops.workers": 3.6,
    "companion.kanban": 4,  # the Dida365 kanban: HTTP client, cards, sync rules over the engine API
    "companion.hosts.console": 5,
    "companion.hosts": 4,
    "handlers": 6,
    "bot": 7,
}
NO_TELEGRAM_BELOW = 6  # nothing under handlers/ imports aiogram
ASTRBOT_HOST = "companion.hosts.astrbot"  # the only package that may import astrbot

# The storage seam: above companion/storage/ only the protocols, the factory and SQLite's named
# maintenance capability may be imported, never a backend's module (sqlite, inmemory, vectors, usage...).
STORAGE_SEAM = frozenset({"companion.storage.base", "companion.storage.factory", "companion.storage.maintenance"})
# Benchmarks of a backend itself, not of the engine: the plain-sqlite3 baseline and the vector scorers.
BACKEND_BENCHES = frozenset({"bench/plain.py", "bench/vectorsearch.py"})


def package_of(module: str) -> str | None:
    best = None
    for name in LAYERS:
        if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best)):
            best = name
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files() -> list[Path]:
    files = [ROOT / "bot.py", ROOT / "memory.py"]
    for folder in ("companion", "handlers", "prompts"):
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    # ``companion/__init__.py`` is only the map of the layers; it imports nothing.
    return [f for f in files if f != ROOT / "companion" / "__init__.py"]


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # ``from companion import chat`` imports the subpackage, not the namespace.
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                         if package_of(f"{node.module}.{alias.name}") not in (None, package_of(node.module)))
    return found


@pytest.mark.parametrize("path", project_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    own = package_of(module_name(path))
    assert own is not None, f"{path.relative_to(ROOT)} is in no layer: add its package to LAYERS"
    upward = []
    for line, target in imports_of(path):
        if target.split(".")[0] == "aiogram" and LAYERS[own] < NO_TELEGRAM_BELOW:
            upward.append(f"line {line}: {target} (aiogram below handlers/)")
        if target.split(".")[0] == "astrbot" and not module_name(path).startswith(ASTRBOT_HOST):
            upward.append(f"line {line}: {target} (astrbot outside {ASTRBOT_HOST})")
        other = package_of(target)
        if other is None or other == own:
            continue
        if LAYERS[other] >= LAYERS[own]:
            upward.append(f"line {line}: {target} (layer {LAYERS[other]}) from {own} (layer {LAYERS[own]})")
    assert not upward, f"{path.relative_to(ROOT)} imports up or sideways:\n" + "\n".join(upward)


def storage_modules_imported(path: Path) -> list[tuple[int, str]]:
    """Every ``companion.storage`` module a file imports, ``from companion.storage import x`` included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("companion.storage"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "companion.storage":
                found.extend((node.lineno, f"companion.storage.{a.name}") for a in node.names)
            elif node.module.startswith("companion.storage."):
                found.append((node.lineno, node.module))
            elif node.module == "companion":
                found.extend((node.lineno, "companion.storage") for a in node.names if a.name == "storage")
    return found


def seam_breaches(path: Path) -> list[str]:
    return [f"line {line}: {target}" for line, target in storage_modules_imported(path) if target not in STORAGE_SEAM]


def engine_users() -> list[Path]:
    """Every module above companion/storage/, and the benchmarks that measure the engine."""
    above = [f for f in project_files() if package_of(module_name(f)) != "companion.storage"]
    benches = [f for f in sorted((ROOT / "bench").rglob("*.py"))
               if f.relative_to(ROOT).as_posix() not in BACKEND_BENCHES]
    return above + benches


@pytest.mark.parametrize("path", engine_users(), ids=lambda p: str(p.relative_to(ROOT)))
def test_storage_is_reached_through_its_seam(path: Path) -> None:
    breaches = seam_breaches(path)
    assert not breaches, (f"{path.relative_to(ROOT)} imports a storage backend directly; use "
                          "companion.storage.factory.open_store and the protocols of companion.storage.base:\n"
                          + "\n".join(breaches))



# One front door: these layers reach memory only through the engine (``memory.MemoryEngine`` and its narrow
# ports: ``settings``, ``kanban``, ``scopes``, ``clear_turns``; the operators' ``engine.admin_port`` and
# ``engine.maintenance``) and the data types of ``companion.core``; the composition roots build the store aside:
# bot.py, and in companion/ops its one composition module.
ENGINE_ONLY = ("companion.chat", "companion.kanban", "companion.hosts", "handlers", "companion.ops")
COMPOSITION = frozenset({"companion.ops.engine_assembly"})


def behind_the_door(module: str) -> bool:
    """Whether a module may reach memory only through the engine: any module of ``ENGINE_ONLY``'s packages
    but the named composition modules."""
    return module not in COMPOSITION and any(module == p or module.startswith(p + ".") for p in ENGINE_ONLY)


@pytest.mark.parametrize("path", [f for f in project_files() if behind_the_door(module_name(f))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_is_the_only_door_to_memory(path: Path) -> None:
    found = [f"line {line}: {target}" for line, target in storage_modules_imported(path)]
    assert not found, (f"{path.relative_to(ROOT)} imports companion.storage; ask the engine (memory.MemoryEngine "
                       "or its ports) and import data types from companion.core:\n" + "\n".join(found))


def test_the_door_guard_catches_even_the_seam(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from companion.storage.base import MemoryStore\nfrom companion import storage\n"
                   "import companion.storage.factory\n", encoding="utf-8")
    assert [t for _, t in storage_modules_imported(bad)] == ["companion.storage.base", "companion.storage",
                                                             "companion.storage.factory"]


def test_the_door_covers_every_part_of_ops_but_its_composition_module() -> None:
    """The whole of companion/ops is behind the door, deep modules included; the one exception is named, and
    it is the only module of companion/ops the guard leaves out."""
    for module in ("companion.ops", "companion.ops.operator_commands", "companion.ops.backup.nightly",
                   "companion.ops.admin.admin_service", "companion.ops.jobs.scheduled", "companion.ops.new.deep"):
        assert behind_the_door(module), module
    assert not behind_the_door("companion.ops.engine_assembly")
    assert not behind_the_door("companion.operations") and not behind_the_door("bot")
    ops = [module_name(f) for f in project_files() if module_name(f).startswith("companion.ops")]
    assert [m for m in ops if not behind_the_door(m)] == ["companion.ops.engine_assembly"]
    # The exception is the composition module, which does build the store: were it not, it would be no exception.
    assert storage_modules_imported(ROOT / "companion" / "ops" / "engine_assembly.py")


# Database drivers: only companion/storage imports them, so what fails in a database reaches the layers above
# as the project's own errors (core.errors.StorageError and its subclasses), whatever the backend.
DRIVERS = frozenset({"sqlite3", "aiosqlite", "asyncpg"})
SQLITE_DRIVERS = frozenset({"sqlite3", "aiosqlite"})


@pytest.mark.parametrize("path", [f for f in project_files() if package_of(module_name(f)) != "companion.storage"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_only_storage_imports_a_database_driver(path: Path) -> None:
    found = [f"line {line}: {target}" for line, target in imports_of(path) if target.split(".")[0] in DRIVERS]
    assert not found, (f"{path.relative_to(ROOT)} imports a database driver; call companion.storage and catch "
                       "core.errors.StorageError:\n" + "\n".join(found))


def source_of(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    return next((f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()), None)


def storage_modules_loaded(path: Path) -> dict[str, Path]:
    """Every ``companion.storage`` module that importing ``path`` loads: its imports, theirs, and the packages
    around each (a package's ``__init__`` runs before its modules)."""
    loaded: dict[str, Path] = {}
    todo = [path]
    while todo:
        tree = ast.parse(todo.pop().read_text(encoding="utf-8"))
        names: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.append(node.module)
                names.extend(f"{node.module}.{alias.name}" for alias in node.names
                             if source_of(f"{node.module}.{alias.name}") is not None)
        for name in names:
            parts = name.split(".")
            for end in range(2, len(parts) + 1):
                module = ".".join(parts[:end])
                found = source_of(module) if module.startswith("companion.storage") else None
                if found is not None and module not in loaded:
                    loaded[module] = found
                    todo.append(found)
    return loaded


def sqlite_reached(path: Path) -> list[str]:
    """What of SQLite importing ``path`` loads: SQLite's package, or a module importing its drivers."""
    reached = [f"line {line}: {target}" for line, target in imports_of(path) if target.split(".")[0] in SQLITE_DRIVERS]
    for module, source in sorted(storage_modules_loaded(path).items()):
        if module == "companion.storage.sqlite" or module.startswith("companion.storage.sqlite."):
            reached.append(module)
        else:
            reached.extend(f"{module} imports {target}" for _, target in imports_of(source)
                           if target.split(".")[0] in SQLITE_DRIVERS)
    return reached


@pytest.mark.parametrize("path", sorted((ROOT / "companion" / "storage" / "postgres").glob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_postgres_loads_nothing_of_sqlite(path: Path) -> None:
    """PostgreSQL's backend shares only backend-neutral modules with SQLite's (migration_sets, vectormath,
    rows...), so a PostgreSQL deployment loads neither SQLite's modules nor its drivers."""
    reached = sqlite_reached(path)
    assert not reached, f"{path.relative_to(ROOT)} loads SQLite's backend:\n" + "\n".join(reached)


def test_the_driver_guards_catch_a_direct_and_an_indirect_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sqlite3\nfrom companion.storage.migration_sets import Migration\n"
                   "from companion.storage import maintenance\n", encoding="utf-8")
    assert [t for _, t in imports_of(bad) if t.split(".")[0] in DRIVERS] == ["sqlite3"]
    reached = sqlite_reached(bad)
    assert reached[0] == "line 1: sqlite3"
    # maintenance is neutral in name only: it loads SQLite's snapshot reader, and with it the package.
    assert {"companion.storage.sqlite", "companion.storage.sqlite.snapshot"} <= set(reached)
    assert not any(r.startswith("companion.storage.migration_sets") for r in reached)

ENGINE = ("companion.engine", "memory")


@pytest.mark.parametrize("path", [f for f in project_files() if package_of(module_name(f)) in ENGINE],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_knows_no_bot_settings(path: Path) -> None:
    """Any host embeds the engine with its own configuration: the engine never reads the bot's Settings."""
    found = [f"line {line}: {target}" for line, target in imports_of(path) if package_of(target) == "companion.config"]
    assert not found, f"{path.relative_to(ROOT)} imports the bot's configuration:\n" + "\n".join(found)


def test_the_seam_guard_catches_a_backend_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from companion.storage.sqlite import SQLiteStore\nfrom companion.storage import inmemory\n"
                   "import companion.storage.sqlite.vectors\nfrom companion.storage.base import MemoryStore\n"
                   "from companion.storage.factory import open_store\n", encoding="utf-8")
    assert seam_breaches(bad) == ["line 1: companion.storage.sqlite", "line 2: companion.storage.inmemory",
                                  "line 3: companion.storage.sqlite.vectors"]


def test_the_guard_catches_an_upward_import(tmp_path: Path) -> None:
    """The check itself must be able to fail: an engine module importing the chat layer is caught."""
    bad = tmp_path / "bad.py"
    bad.write_text("from companion.chat.pipeline import ChatService\nimport memory\n", encoding="utf-8")
    targets = [package_of(t) for _, t in imports_of(bad)]
    assert [LAYERS[t] for t in targets if t] == [4, 3]
    assert all(LAYERS[t] >= LAYERS["companion.engine"] for t in targets if t)


# What ``pip install .`` must run without: the engine's packages (``memory.py`` and ``companion/`` below the
# chat layer but for ``config``, the bot's settings). The Telegram bot, the console and the operator tools
# come as the extras [bot] and [ops]; none of their packages may be imported by the engine, even lazily.
WHEEL_ENGINE = ("companion.core", "companion.storage", "companion.recall", "companion.llm", "prompts",
                "companion.engine", "memory")
NOT_THE_ENGINES = frozenset({"aiogram", "pandas", "apscheduler", "prompt_toolkit", "tqdm", "matplotlib",
                             "pydantic_settings"})
# Optional backends an engine module loads only when configured (installed apart or as extras; asyncpg:
# the PostgreSQL store, opened by the factory for a postgresql:// URL, the extra [postgres]), or only where
# installed (aiohttp: the LLM client's transport, the SDK's own without it).
OPTIONAL = frozenset({"sentence_transformers", "sqlean", "pysqlite3", "asyncpg", "aiohttp"})


def engine_files() -> list[Path]:
    return [f for f in project_files() if package_of(module_name(f)) in WHEEL_ENGINE]


def third_party(path: Path) -> set[str]:
    """Top-level names of the modules a file imports that are neither the standard library nor the project."""
    tops = {target.split(".")[0] for _, target in imports_of(path)}
    tops |= set(re.findall(r"import_module\(\"(\w+)", path.read_text(encoding="utf-8")))
    return {t for t in tops if t not in sys.stdlib_module_names and package_of(t) is None and t != "companion"}


def engine_requirement_names() -> set[str]:
    """The wheel's own dependencies, as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {_requirement_name(line) for line in project["dependencies"]}


def _requirement_name(requirement: str) -> str:
    return re.split(r"[<>=~!;\[ (]", requirement)[0].lower().replace("_", "-")


@pytest.mark.parametrize("path", engine_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_engine_imports_nothing_of_the_bot_or_the_operator_tools(path: Path) -> None:
    found = [f"line {line}: {target}" for line, target in imports_of(path) if target.split(".")[0] in NOT_THE_ENGINES]
    assert not found, (f"{path.relative_to(ROOT)} imports what only the [bot]/[ops] extras install:\n"
                       + "\n".join(found))


def test_the_engine_requirements_cover_every_package_the_engine_imports() -> None:
    """pyproject.toml's dependencies are the wheel's: what the engine imports must be in them."""
    declared = engine_requirement_names()
    # A declared package's own unconditional requirements come with it (pydantic brings pydantic-core).
    brought = {_requirement_name(r) for d in declared for r in requires(d) or () if ";" not in r}
    distributions = packages_distributions()
    missing = {}
    for path in engine_files():
        for module in third_party(path) - OPTIONAL:
            names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
            if not names & (declared | brought):
                missing[module] = str(path.relative_to(ROOT))
    assert not missing, f"imported by the engine but not in pyproject.toml's dependencies: {missing}"
    assert declared.isdisjoint({n.replace("_", "-") for n in NOT_THE_ENGINES} | {"prompt-toolkit"})


def test_the_extras_guard_catches_a_bot_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import pandas as pd\nfrom aiogram import Bot\nimport numpy\n", encoding="utf-8")
    assert {t.split(".")[0] for _, t in imports_of(bad)} & NOT_THE_ENGINES == {"pandas", "aiogram"}
    assert third_party(bad) == {"pandas", "aiogram", "numpy"}


def test_every_package_says_what_it_may_import() -> None:
    for name in LAYERS:
        path = ROOT / Path(*name.split("."))
        init = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(ROOT)} needs a docstring saying what it holds and may import"


def test_the_namespace_package_imports_nothing() -> None:
    assert imports_of(ROOT / "companion" / "__init__.py") == []
