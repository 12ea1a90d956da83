"""Prompt templates of the companion (``*.md`` beside this file), rendered with exactly the inputs they name.

A package so that the templates ship in the wheel and are found the same way from the repository or an
installed copy (``importlib.resources``). Bottom layer: imports only ``companion.core``."""

from __future__ import annotations

from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from string import Template

from companion.core.errors import PromptError

PROMPT_DIR: Traversable = resources.files(__name__)


@cache
def _template(name: str) -> Template:
    path = PROMPT_DIR / f"{name}.md"
    try:
        template = Template(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PromptError(f"prompt {name!r} not found at {path}") from exc
    if not template.is_valid():
        # A stray "$" (say "$5") would otherwise fail only at render time, with a bare ValueError.
        raise PromptError(f"prompt {name!r} has a '$' that is not an input; write '$$' for a literal '$'")
    return template


def names() -> list[str]:
    return sorted(p.name.removesuffix(".md") for p in PROMPT_DIR.iterdir() if p.name.endswith(".md"))


def inputs(name: str) -> set[str]:
    return set(_template(name).get_identifiers())


def render(name: str, **values: object) -> str:
    """Fill a prompt. Missing or unexpected inputs are a programming error, raised at once."""
    expected = inputs(name)
    given = set(values)
    if given != expected:
        raise PromptError(
            f"prompt {name!r} takes {sorted(expected)}; missing {sorted(expected - given)}, "
            f"unexpected {sorted(given - expected)}"
        )
    # safe_substitute would leave "$x" in user text alone, but inputs are complete, so substitute is exact.
    return _template(name).substitute({k: str(v) for k, v in values.items()})
