"""Build the AstrBot plugin folder and its zip: ``python -m companion.hosts.astrbot.build [dist]``.

AstrBot loads every plugin into one process as ``data.plugins.<folder>``, so nothing of ours may sit at a
top-level name (``memory``, ``companion``, ``prompts`` would clash with other plugins): the engine is
vendored inside the plugin folder and every import of ours is rewritten to a relative one. Prompts and
dictionaries are found through ``importlib.resources`` beside their modules, so they move with them."""

from __future__ import annotations

import ast
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

NAME = "astrbot_plugin_companion_memory"
ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
OURS = frozenset({"companion", "memory", "prompts"})
# The engine and what it stands on; the bot's settings, chat, ops and Telegram layers stay behind.
PACKAGES = ("companion/core", "companion/storage", "companion/recall", "companion/llm", "companion/engine",
            "prompts")
# README.md is the plugin's own, written for AstrBot users (docs/astrbot.md is the developers' page).
PLUGIN_FILES = ("metadata.yaml", "_conf_schema.json", "requirements.txt", "README.md")
LEFT_OUT = frozenset({"build.py", "main.py"})


class BuildError(RuntimeError):
    """An import the rewriter cannot make relative (``import companion.x`` as a dotted name)."""


def relative_imports(source: str, depth: int, name: str) -> str:
    """``source`` with every import of ours made relative to the plugin's root, ``depth`` packages below it."""
    lines = source.splitlines(keepends=True)
    dots = "." * (depth + 1)
    edits: list[tuple[int, int, int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in OURS:
            start = lines[node.lineno - 1].index("from", node.col_offset)
            head = lines[node.lineno - 1][start:]
            offset = head.index(node.module)
            edits.append((node.lineno - 1, start + offset, start + offset, dots))
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in OURS for a in node.names):
            if len(node.names) != 1 or "." in node.names[0].name:
                raise BuildError(f"{name}:{node.lineno}: write 'from x import y' for an import of ours")
            alias = node.names[0]
            text = f"from {dots} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
            assert node.end_col_offset is not None
            edits.append((node.lineno - 1, node.col_offset, node.end_col_offset, text))
    for row, begin, end, text in sorted(edits, reverse=True):
        lines[row] = lines[row][:begin] + text + lines[row][end:]
    return "".join(lines)


def sources() -> Iterator[tuple[Path, Path]]:
    """(file in the repository, its place in the plugin folder)."""
    yield ROOT / "memory.py", Path("memory.py")
    yield ROOT / "companion" / "__init__.py", Path("companion/__init__.py")
    yield ROOT / "companion" / "hosts" / "__init__.py", Path("companion/hosts/__init__.py")
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".md", ".txt"):
                yield path, path.relative_to(ROOT)
    for path in sorted(HERE.glob("*.py")):
        if path.name not in LEFT_OUT:
            yield path, path.relative_to(ROOT)
    yield HERE / "main.py", Path("main.py")


def build(dist: Path) -> tuple[Path, Path]:
    """Write ``dist/<NAME>/`` and ``dist/<NAME>.zip`` (the folder at the zip's top, as AstrBot's WebUI
    upload expects); returns both."""
    target = dist / NAME
    if target.exists():
        shutil.rmtree(target)
    for source, place in sources():
        out = target / place
        out.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".py":
            out.write_text(relative_imports(source.read_text(encoding="utf-8"), len(place.parts) - 1, str(place)),
                           encoding="utf-8")
        else:
            shutil.copyfile(source, out)
    (target / "__init__.py").write_text('"""The companion memory plugin for AstrBot (built)."""\n', encoding="utf-8")
    for name in PLUGIN_FILES:
        shutil.copyfile(HERE / name, target / name)
    archive = dist / f"{NAME}.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        # The folder's own entry first: AstrBot's installer takes the zip's first name as the folder to unpack.
        zipped.write(target, f"{NAME}/")
        for path in sorted(target.rglob("*")):
            zipped.write(path, path.relative_to(dist).as_posix() + ("/" if path.is_dir() else ""))
    return target, archive


def main(argv: list[str]) -> int:
    folder, archive = build(Path(argv[0]) if argv else ROOT / "dist")
    print(f"{folder}\n{archive}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
