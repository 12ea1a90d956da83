"""Prompt templates are files in ``prompts/``; each is rendered with exactly the inputs it names."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from string import Template

from companion.errors import PromptError

PROMPT_DIR = Path(__file__).resolve().parent.parent / "prompts"


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
    return sorted(p.stem for p in PROMPT_DIR.glob("*.md"))


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
