"""What a MemDaily message or question is about, read from the data set's own schema (``meta_profile.csv``).

MemSim builds every persona from one schema: the same relations (亲属关系 表妹, 同事关系 上司 ...), the same
place and item kinds (小区, 公园 ...; 手机, 运动鞋 ...) with their named values (绿洲家园 is a 小区, 苹果iPhone 13
a 手机), and events described by the same attributes (主要内容, 地点, 时间, 规模, 持续时间), each message stating
one attribute of one subject ("我表妹学历是硕士", "金融科技精英论坛的地点是北京"). So a question about 表妹 asked
of another persona is about a memory there too whenever that persona has a 表妹. The subjects found here
are the relation (爸爸 and 妈妈 read as 父亲 and 母亲), the place or item kind (named directly or through one
of its values) and the event name; ``bench.recall`` counts an other-user turn as a clean negative only when
no memory of the other user shares a subject with the question. The rule reads the data, never the engine.

Only the schema's value lists are read (relations, kinds, named places and items); the personal-data
columns (names, numbers) are not.
"""

from __future__ import annotations

import ast
import csv
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_FILE = "meta_profile.csv"
RELATION_FIELDS = ("亲属关系", "同事关系")
KIND_FIELDS = ("物品类型", "地点类型")  # their values name further fields: 手机 -> the phones, 小区 -> the estates
EVENT_ATTRIBUTE_FIELDS = ("主要内容", "地点", "时间", "规模", "持续时间")
# The messages call 父亲 and 母亲 what people call them ("我妈妈今年61岁了").
RELATION_ALIASES = {"爸爸": "父亲", "妈妈": "母亲"}


def _compact(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


@dataclass(frozen=True, slots=True)
class Schema:
    relations: tuple[str, ...] = ()
    kinds: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # kind -> its named values (compacted)
    event_attributes: tuple[str, ...] = EVENT_ATTRIBUTE_FIELDS

    @classmethod
    def read(cls, path: Path) -> Schema:
        ranges: dict[str, list[str]] = {}
        with path.open(encoding="utf-8-sig", newline="") as handle:
            for row in csv.reader(handle):
                if len(row) >= 2 and row[1].strip().startswith("["):
                    values = ast.literal_eval(row[1].strip())
                    ranges[row[0].strip()] = [str(v) for v in values]
        relations = tuple(v for name in RELATION_FIELDS for v in ranges.get(name, ()))
        kinds = {kind: tuple(_compact(v) for v in ranges.get(kind, ()))
                 for name in KIND_FIELDS for kind in ranges.get(name, ())}
        return cls(relations, kinds)

    @classmethod
    def find(cls, src: Path) -> Schema | None:
        """The schema beside the messages (``memdaily/meta_profile.csv`` for ``memdaily/messages_and_QAs``)."""
        for folder in (src if src.is_dir() else src.parent, *src.resolve().parents[:2]):
            candidate = folder / SCHEMA_FILE
            if candidate.is_file():
                return cls.read(candidate)
        return None

    def subjects(self, text: str) -> set[str]:
        """``relation:表妹``, ``kind:手机``, ``event:金融科技精英论坛`` for each one the text names."""
        compact = _compact(text)
        found = {f"relation:{r}" for r in self.relations if r in compact}
        found.update(f"relation:{r}" for alias, r in RELATION_ALIASES.items()
                     if alias in compact and r in self.relations)
        bare = compact.replace("的", "")  # "苹果的iPhone13" names the value "苹果iPhone 13"
        found.update(f"kind:{kind}" for kind, values in self.kinds.items()
                     if kind in compact or any(v and v in bare for v in values))
        found.update(f"event:{name}" for name in self.event_names(compact))
        return found

    def event_names(self, text: str) -> set[str]:
        """Event names as MemSim's messages state them: "<name>的<event attribute>是…" (after an optional
        "我将要参加的"), "我将要参加<name>"."""
        attributes = "|".join(map(re.escape, self.event_attributes))
        names = set()
        for clause in re.split(r"[，。！？；,.!?;]", text):
            if match := re.match(rf"(?:我将要参加的)?(.+?)(?:，它)?的(?:{attributes})是", clause):
                names.add(match[1])
            if match := re.search(r"我将要参加的?(.+)$", clause):
                names.add(match[1])
        return {n for n in names if len(n) >= 2 and not n.startswith(("我", "它"))}

    def of_question(self, gold: Iterable[str]) -> set[str]:
        """A question's subjects: those of its gold messages (the data set's link from the question to what
        it asks about; the question itself may name only a condition, "那个61岁的人")."""
        return {s for text in gold for s in self.subjects(text)}
