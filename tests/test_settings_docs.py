"""The three places a setting is described agree: every key of ``Settings`` is in ``.env.example`` and in
docs/operator.md's reference, and a value ``.env.example`` sets is the code's default, so following the quick
start (``cp .env.example .env``) runs the settings that were measured. Other developers add settings: a key
left out of either document fails here by name."""

from __future__ import annotations

import os
import re
from pathlib import Path
from unittest import mock

import pytest

from companion.config.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
_LINE = re.compile(r"^#?\s*([A-Z][A-Z0-9_]+)=(.*)$")


def example() -> dict[str, tuple[str, bool]]:
    """Key -> (value, set): set lines and commented-out ``# KEY=value`` lines of .env.example."""
    found: dict[str, tuple[str, bool]] = {}
    for line in (ROOT / ".env.example").read_text(encoding="utf-8").splitlines():
        match = _LINE.match(line.strip())
        if match:
            found.setdefault(match.group(1), (match.group(2).strip(), not line.startswith("#")))
    return found


KEYS = sorted(name.upper() for name in Settings.model_fields)


def settings_with(**env: str) -> Settings:
    with mock.patch.dict(os.environ, env, clear=True):
        return Settings(_env_file=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("key", KEYS)
def test_every_setting_is_in_the_example_and_the_operators_reference(key: str) -> None:
    assert key in example(), f"{key} is not in .env.example"
    assert f"`{key}`" in (ROOT / "docs" / "operator.md").read_text(encoding="utf-8"), \
        f"{key} is not in docs/operator.md"


@pytest.mark.parametrize("key", [k for k, (value, is_set) in example().items() if is_set and value])
def test_a_value_the_example_sets_is_the_default(key: str) -> None:
    if key not in KEYS:
        pytest.fail(f".env.example sets {key}, which no setting reads")
    name = key.lower()
    value = example()[key][0]
    assert getattr(settings_with(**{key: value}), name) == getattr(settings_with(), name), \
        f".env.example sets {key}={value}, not the default"
