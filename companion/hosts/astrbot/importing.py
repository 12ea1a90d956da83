"""Other AstrBot memory plugins' files as memories, nothing lost, nothing doubled on a second run.

The per-user design keeps ``{user_id}.json``: a list (or ``{"memories": [...]}``) of ``{id, content,
time, importance (1-10), last_access_time, valid_time (seconds, 0/None: forever)}``. The group design
keeps ``{group_id}.json``: ``{"users": {user_id: [{id, type, content, created_at, updated_at}]}}`` (or
the users' map itself, or a list of ``{"user_id"/"id", "memories"}``). Times are unix seconds or
``YYYY-mm-dd HH:MM:SS`` (local time of the plugin's timezone). Each record's content hash is noted per
scope, so a re-run skips what it brought in; a record's ``valid_time`` is the memory's exact end."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from companion.core.models import MemoryDraft, MemoryType, Origin, Tier
from companion.core.setting import HOST_LABEL, IMPORTED
from companion.engine.tools import lifetime_validity
from companion.hosts.astrbot.memory_service import Imported, MemoryService
from companion.hosts.astrbot.scopes import Speaker


@dataclass(frozen=True, slots=True)
class Record:
    speaker: Speaker
    content: str
    created: datetime | None
    updated: datetime | None
    accessed: datetime | None
    importance: float
    seconds: int
    type: MemoryType

    @property
    def digest(self) -> str:
        stamp = "" if self.created is None else self.created.isoformat()
        return hashlib.sha1(f"{self.content}\x1f{stamp}".encode()).hexdigest()[:16]


def when(value: Any, tz: tzinfo) -> datetime | None:
    if isinstance(value, bool) or value in (None, ""):
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value) / (1000 if value > 1e11 else 1), UTC)
    text = str(value).strip()
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=tz)).astimezone(UTC)


def _number(value: Any, default: float) -> float:
    try:
        return float(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def records(path: Path, platform: str, tz: tzinfo) -> Iterator[Record]:
    """The file's memories; raises ValueError for a file in neither format."""
    data = json.loads(path.read_text(encoding="utf-8"))
    owner = path.stem
    if isinstance(data, dict) and isinstance(data.get("memories"), list):
        data = data["memories"]
    if isinstance(data, list) and all(isinstance(i, dict) and "content" in i for i in data):
        for item in data:  # the per-user design: the file names the user
            yield _user_record(Speaker(platform, owner), item, tz)
        return
    users = data.get("users", data) if isinstance(data, dict) else data
    if isinstance(users, list):
        users = {str(u.get("user_id") or u.get("id")): u.get("memories") or [] for u in users if isinstance(u, dict)}
    if not isinstance(users, dict) or not users:
        raise ValueError(f"{path.name}: neither a per-user nor a per-group memory file")
    for user, items in users.items():
        if not isinstance(items, list):
            raise ValueError(f"{path.name}: the memories of {user} are not a list")
        for item in items:
            if isinstance(item, dict) and str(item.get("content") or "").strip():
                yield _group_record(Speaker(platform, str(user), owner), item, tz)


def _user_record(speaker: Speaker, item: dict[str, Any], tz: tzinfo) -> Record:
    created = when(item.get("time"), tz)
    seconds = int(_number(item.get("valid_time"), 0))
    return Record(speaker, str(item["content"]).strip(), created, created, when(item.get("last_access_time"), tz),
                  max(1.0, min(10.0, _number(item.get("importance"), 5))) * 10, max(0, seconds),
                  MemoryType.FACT)


def _group_record(speaker: Speaker, item: dict[str, Any], tz: tzinfo) -> Record:
    try:
        kind = MemoryType(str(item.get("type") or "fact").lower())
    except ValueError:
        kind = MemoryType.FACT
    created = when(item.get("created_at"), tz)
    return Record(speaker, str(item["content"]).strip(), created, when(item.get("updated_at"), tz), None,
                  70.0 if kind is MemoryType.INSTRUCTION else 60.0, 0, kind)


async def import_folder(service: MemoryService, folder: Path, platform: str) -> Imported:
    """Every ``*.json`` in ``folder``, written through the engine (its recall indexes stay current); the
    record's last access is kept as the memory's."""
    added = skipped = bad = 0
    now = service.now()
    settings = service.engine.settings
    for path in sorted(folder.glob("*.json")):
        try:
            found = list(records(path, platform, service.options.tz))
        except (ValueError, OSError):
            bad += 1
            continue
        for record in found:
            scope = record.speaker.scope
            imported = await settings.get(IMPORTED, scope) or {}
            if record.digest in imported:
                skipped += 1
                continue
            (handle, *_) = await service.engine.remember(scope, [_draft(service, record, now)], now)
            if record.accessed is not None:
                await service.engine.touch(scope, [handle], record.accessed)
            await settings.set(IMPORTED, scope, {**imported, record.digest: handle})
            await settings.set(HOST_LABEL, scope, record.speaker.label)
            added += 1
    return Imported(added, skipped, bad)


def _draft(service: MemoryService, record: Record, now: datetime) -> MemoryDraft:
    return MemoryDraft(event=record.content, keywords=service.engine.keywords.keywords(record.content),
                       importance=record.importance, validity=lifetime_validity(record.seconds), type=record.type,
                       origin=Origin.EXPLICIT, created_at=record.created or now, source_at=record.updated,
                       tier=Tier.MEDIUM if record.seconds <= 0 else None,
                       expires_at=(record.created or now) + timedelta(seconds=record.seconds) if record.seconds > 0
                       else None)
