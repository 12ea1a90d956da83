"""KdConv (thu-coai/KdConv, Apache-2.0) -> dataset: one user scope per dialogue.

KdConv is Chinese multi-turn chat about films, music and travel in which each message may be grounded on
knowledge triples ``(name, attrname, attrvalue)`` ("恭王府", "门票", "40元"). The converter reads the data straight
from a fetched git snapshot (``git --git-dir=SRC show HEAD:data/<domain>/<split>.json``) or from a checkout
whose ``data/`` folder holds the same files; nothing is copied into the repository.

Memories are the distinct triples the dialogue uses, as one sentence each ("恭王府的门票是40元"; an
``Information`` triple is its value, prefixed with the name when the value does not contain it). A query is
a grounded message whose previous message is not grounded, that is, the other side asked or said something
and the reply then used knowledge: the query text is that previous message, ``context`` the same speaker's two
messages before it, ``reply`` the message before the query (the companion's last reply), and ``relevant`` the
triples the grounded message uses. Messages have no timestamps: every dialogue starts at the same synthetic
moment, one minute a message.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.convert.common import ConvertStats
from bench.dataset import DEFAULT_TZ, DatasetLine, MemoryLine, QueryLine

DOMAINS = ("film", "music", "travel")
DIALOGUE_START = datetime(2024, 3, 1, 20, 0, tzinfo=DEFAULT_TZ)
EARLIER_TURNS = 2  # the same speaker's messages before the query, as the bot's context holds them
INFORMATION = "Information"


def read_split(src: Path, domain: str, split: str) -> list[dict[str, Any]]:
    """One domain's split from a git directory (a bare snapshot) or a folder holding ``data/``."""
    path = f"data/{domain}/{split}.json"
    if (src / "data").is_dir():
        raw = (src / path).read_text(encoding="utf-8")
    else:
        done = subprocess.run(["git", f"--git-dir={src}", "show", f"HEAD:{path}"], capture_output=True,
                              check=False)
        if done.returncode != 0:
            raise ValueError(f"{src}: cannot read {path}: {done.stderr.decode(errors='replace').strip()}")
        raw = done.stdout.decode("utf-8")
    dialogues = json.loads(raw)
    if not isinstance(dialogues, list):
        raise ValueError(f"{src}:{path}: expected a list of dialogues")
    return dialogues


def triple_text(name: str, attribute: str, value: str) -> str:
    """A knowledge triple as one sentence: "恭王府的门票是40元"; a description is its own text."""
    value = " ".join(value.split())
    if attribute == INFORMATION:
        return value if name in value else f"{name}：{value}"
    return f"{name}的{attribute}是{value}"


def _triples(message: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(
        triple_text(str(a.get("name", "")), str(a.get("attrname", "")), str(a.get("attrvalue", "")))
        for a in message.get("attrs") or () if a.get("attrvalue")
    ))


def _dialogue_lines(user: str, messages: Sequence[dict[str, Any]], stats: ConvertStats) -> Iterator[DatasetLine]:
    ids: dict[str, str] = {}
    for message in messages:
        for text in _triples(message):
            if text not in ids:
                ids[text] = f"{user}:k{len(ids)}"
                yield MemoryLine(user, ids[text], DIALOGUE_START, text)
    for position in range(1, len(messages)):
        grounded = _triples(messages[position])
        asked = str(messages[position - 1].get("message", "")).strip()
        if not grounded or _triples(messages[position - 1]):
            continue
        if not asked:
            stats.drop("empty message before a grounded one")
            continue
        earlier = [str(messages[i].get("message", "")).strip() for i in range(position - 3, -1, -2)][:EARLIER_TURNS]
        reply = str(messages[position - 2].get("message", "")).strip() if position >= 2 else None
        when = DIALOGUE_START + timedelta(minutes=position)
        yield QueryLine(user, f"{user}:m{position}", when, asked, tuple(ids[t] for t in grounded),
                        tuple(t for t in reversed(earlier) if t), reply or None)


def convert_kdconv(src: Path, stats: ConvertStats, limit: int | None = None, *,
                   domains: Sequence[str] = DOMAINS, split: str = "test") -> Iterator[DatasetLine]:
    """``limit``: the first N dialogues of each domain."""
    for domain in domains:
        for index, dialogue in enumerate(read_split(src, domain, split)[:limit]):
            messages = dialogue.get("messages") or []
            if not messages:
                stats.drop("dialogue without messages")
                continue
            yield from _dialogue_lines(f"kdconv-{domain}:{index}", messages, stats)
