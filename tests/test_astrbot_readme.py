"""The plugin ships its own README, for AstrBot users: every command and setting the plugin has, and no path that
exists only in this repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

from companion.hosts.astrbot.build import build

HERE = Path(__file__).resolve().parents[1] / "companion" / "hosts" / "astrbot"


def test_the_built_plugin_carries_a_readme_for_astrbot_users(tmp_path: Path) -> None:
    folder, _ = build(tmp_path)
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert readme == (HERE / "README.md").read_text(encoding="utf-8")
    for repo_only in ("make ", "tests/", "docs/", "BENCHMARKS", "companion/", ".venv"):
        assert repo_only not in readme, f"{repo_only!r} means nothing to an AstrBot user"
    for setting in json.loads((HERE / "_conf_schema.json").read_text(encoding="utf-8")):
        assert f"`{setting}`" in readme, f"the setting {setting} is not explained"
    main = (HERE / "main.py").read_text(encoding="utf-8")
    for command in re.findall(r'filter\.command\("([^"]+)"', main):
        assert f"/{command}" in readme, f"the command /{command} is not explained"
