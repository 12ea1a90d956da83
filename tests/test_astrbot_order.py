"""The AstrBot tests' place in a session (tests/astrbot/venvs.py): last, each part in its order, and the
virtualenvs the session starts building are the ones its tests wait for."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from tests.astrbot.venvs import HERE, astrbot_last, newest, pinned, wanted

TESTS = HERE.parent


@dataclass(frozen=True)
class Item:
    path: Path
    fixturenames: Collection[str] = ()


def test_astrbot_tests_go_last_and_the_rest_keep_their_order() -> None:
    plugin, newest_one = Item(HERE / "test_plugin.py", ("rig",)), Item(HERE / "test_newest.py", ("newest_python",))
    elsewhere = Item(TESTS / "test_bench.py", ("astrbot_python",))  # takes the virtualenv: runs AstrBot
    first, second = Item(TESTS / "test_admin.py", ("tmp_path",)), Item(TESTS / "test_astrbot_weekly.py")
    assert astrbot_last([plugin, first, newest_one, elsewhere, second]) == [
        first, second, plugin, newest_one, elsewhere]
    assert astrbot_last([first, second]) == [first, second]


def test_only_the_virtualenvs_the_tests_take_are_built() -> None:
    assert wanted([Item(TESTS / "test_admin.py", ("tmp_path",))]) == []
    assert wanted([Item(HERE / "test_plugin.py", ("rig", "astrbot_python"))]) == [pinned()]
    both = [Item(HERE / "test_plugin.py", ("astrbot_python",)), Item(HERE / "test_newest.py", ("newest_python",))]
    assert wanted(both) == [pinned(), *filter(None, [newest()])]
