"""DuLeMon (samples.json, JSON lines) -> dataset: one user scope per session.

Memories are the persona sentences both sides have stated (``user_said_persona`` and ``bot_persona``);
``user_no_said_persona`` is left out because the user never said it, so a bot could not remember it.
A query is each bot turn tagged with a persona id; its text is the single user utterance right before
it, because that is what the bot's recall gets at reply time (one incoming message), with the recent
context the bot also has: the user's earlier turns (``context``) and the bot's previous reply
(``reply``). A bot turn without a tag used no persona: the user utterance before it becomes a negative
turn (``relevant: []``), real chit-chat for the false-injection rate. DuLeMon also tags *user* utterances
with the persona they state ("Usr: 才上三年级……\tU3"): a negative turn whose utterance states one of the
user's stored persona sentences carries that id in ``about`` (the user restating their own fact is correct
recall, not a false injection); a tag naming a persona the user never said (``user_no_said_persona``, not
stored) does not count.
DuLeMon has no timestamps: every session starts at the same synthetic moment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.convert.common import ConvertStats, join_segmented
from bench.dataset import DEFAULT_TZ, DatasetLine, MemoryLine, QueryLine

SESSION_START = datetime(2024, 1, 1, 20, 0, tzinfo=DEFAULT_TZ)
_PERSONA = re.compile(r"\s*([UB]\d+)\s*[:：]\s*(.*)", re.DOTALL)
_SPEAKER = re.compile(r"\s*(Usr|Bot|U\d+|B\d+)\s*[:：]\s*", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Turn:
    speaker: str  # "Usr" or "Bot"
    text: str
    tag: str | None  # persona id this turn is grounded on


def read_sessions(src: Path) -> list[dict[str, Any]]:
    sessions = []
    for number, raw in enumerate(src.read_text(encoding="utf-8").splitlines(), start=1):
        if raw.strip():
            try:
                sessions.append(json.loads(raw))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{src}:{number}: {exc}") from exc
    return sessions


def parse_persona(line: str) -> tuple[str, str]:
    """``U1: 我 喜欢 运动`` -> (``U1``, ``我喜欢运动``)."""
    match = _PERSONA.fullmatch(line)
    if not match:
        raise ValueError(f"persona line without an id: {line!r}")
    return match[1], join_segmented(match[2])


def parse_turn(line: str) -> Turn:
    """``Bot: 好 啊\\tB5`` -> Turn("Bot", "好啊", "B5"); some turns lack the space after the colon."""
    body, _, tag = line.partition("\t")
    match = _SPEAKER.match(body)
    speaker = match[1].capitalize() if match else ""
    text = join_segmented(body[match.end():] if match else body)
    return Turn(speaker, text, tag.strip() or None)


def session_sentences(session: dict[str, Any]) -> list[str]:
    """Every persona line and utterance of a session as plain text (for MemDaily distractors)."""
    personas = [parse_persona(line)[1] for key in ("bot_persona", "user_said_persona", "user_no_said_persona")
                for line in session.get(key, [])]
    return personas + [parse_turn(line).text for line in session.get("conversation", [])]


def _session_lines(index: int, session: dict[str, Any], stats: ConvertStats) -> Iterator[DatasetLine]:
    user = f"dulemon:{index}"
    memory_ids: set[str] = set()
    for key in ("user_said_persona", "bot_persona"):
        for line in session.get(key, []):
            tag, text = parse_persona(line)
            memory_ids.add(tag)
            yield MemoryLine(user, f"{index}:{tag}", SESSION_START, text)
    previous_user: str | None = None
    previous_tags: tuple[str, ...] = ()
    earlier: list[str] = []
    last_reply: str | None = None
    for position, line in enumerate(session.get("conversation", [])):
        turn = parse_turn(line)
        if turn.speaker == "Usr":
            if previous_user:
                earlier.append(previous_user)
            previous_user = turn.text
            previous_tags = tuple(f"{index}:{tag}" for tag in _tags(turn.tag) if tag in memory_ids)
            continue
        when = SESSION_START + timedelta(minutes=position + 1)
        reply, last_reply = last_reply, turn.text
        if turn.tag is None:
            if previous_user:
                if previous_tags:
                    stats.note("chit-chat turns stating a stored persona (about)", 1)
                yield QueryLine(user, f"{index}:t{position}", when, previous_user, (), tuple(earlier), reply,
                                previous_tags)
            continue
        if turn.tag not in memory_ids:
            stats.drop("tag names a persona the user never said")
        elif not previous_user:
            stats.drop("no user utterance before the bot turn")
        else:
            yield QueryLine(user, f"{index}:t{position}", when, previous_user, (f"{index}:{turn.tag}",),
                            tuple(earlier), reply)


def _tags(tag: str | None) -> list[str]:
    """A turn's persona tags: "U3", or several ("U1,U2")."""
    return [t for t in re.split(r"[,\s，]+", tag or "") if t]


def convert_dulemon(src: Path, stats: ConvertStats, limit: int | None = None) -> Iterator[DatasetLine]:
    for index, session in enumerate(read_sessions(src)[:limit]):
        yield from _session_lines(index, session, stats)
