"""The plugin's behaviour on the engine, free of AstrBot: what a request is told, the model's memory tools,
the users' and admins' commands, exports, backups and daily upkeep. Every call names a ``Speaker`` taken
from the event in code; nothing a model or a user types can name another scope, bar an admin command.

Exact lifetimes (the per-user design's ``valid_time`` in seconds) are kept beside the engine's coarser
validity, per scope, and a memory past its time is forgotten the next time its scope is read."""

from __future__ import annotations

import asyncio
import csv
import io
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from companion.core import dates, followups
from companion.core.errors import LLMError, MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Tier, Turn
from companion.core.setting import EXACT_EXPIRY, FOLLOWUP_CUES, HOST_ADDRESS, HOST_LABEL, WEEKLY
from companion.core.text import sendable
from companion.core.timeutil import utcnow
from companion.engine.profile import matching_traits
from companion.hosts.astrbot import texts
from companion.hosts.astrbot.arguments import (
    BadArgument,
    content_of,
    handle_of,
    importance_of,
    seconds_of,
    type_of,
    validity_for,
)
from companion.hosts.astrbot.fences import fenced
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.scopes import Speaker
from companion.hosts.astrbot.weekly import next_at
from companion.llm.base import JsonModel
from companion.recall.keywords import KeywordExtractor
from companion.storage.base import MemoryStore
from companion.storage.factory import open_store, sqlite_url
from memory import MemoryEngine

log = logging.getLogger(__name__)

TYPE_ORDER = {MemoryType.INSTRUCTION: 0, MemoryType.PREFERENCE: 1, MemoryType.FACT: 2, MemoryType.EVENT: 3}
MAX_LIST = 30
MAX_SEARCH = 10
CONVERSATION_GAP = timedelta(hours=12)  # silence that makes the next message a new conversation (the bot's)
CSV_FIELDS = ("scope", "id", "type", "tier", "importance", "content", "created_at", "updated_at",
              "last_accessed_at", "expires_at")


def for_prompt(memories: Sequence[Memory], limit: int) -> list[Memory]:
    """The speaker's memories a request carries: instruction > preference > fact > event, then newest."""
    ranked = sorted(memories, key=lambda m: (TYPE_ORDER.get(m.type, 9), -m.created_at.timestamp()))
    return ranked[:limit]


@dataclass(frozen=True, slots=True)
class Imported:
    added: int
    skipped: int
    bad: int


class MemoryService:
    def __init__(self, engine: MemoryEngine, store: MemoryStore, options: Options, data_dir: Path,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.store = store
        self.options = options
        self.data_dir = data_dir
        self._clock = clock
        self._labelled: set[str] = set()
        self._learning: set[Scope] = set()
        self._addressed: dict[Scope, str] = {}  # private scopes whose address this process has stored
        self._refreshing: set[Scope] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, data_dir: Path, options: Options, llm: JsonModel | None,
                   clock: Callable[[], datetime] = utcnow) -> MemoryService:
        data_dir.mkdir(parents=True, exist_ok=True)
        store = await open_store(sqlite_url(data_dir / "memory.sqlite3"))
        try:
            from companion.llm.embeddings import E5Embedder, Embedder, OpenAIEmbedder, builtin_embedder

            embedder: Embedder | None = None
            if options.embedding_base_url and options.embedding_model:
                embedder = OpenAIEmbedder(base_url=options.embedding_base_url, model=options.embedding_model,
                                          api_key=options.embedding_api_key)
            elif options.semantic:
                embedder = builtin_embedder("in AstrBot's Python")
            config = options.engine_config(builtin=isinstance(embedder, E5Embedder))
            engine = await MemoryEngine.create(store, config, KeywordExtractor(), llm, embedder=embedder, clock=clock)
        except BaseException:
            await store.close()
            raise
        return cls(engine, store, options, data_dir, clock)

    def now(self) -> datetime:
        return self._clock()

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        await self.engine.close()
        await self.store.close()

    # ---- reading a scope ---------------------------------------------------------------------------

    async def _label(self, speaker: Speaker) -> None:
        key = speaker.scope.key
        if key not in self._labelled:
            await self.store.set_setting(HOST_LABEL, speaker.scope, speaker.label)
            self._labelled.add(key)

    async def _expiry(self, scope: Scope) -> dict[str, float]:
        found: dict[str, float] | None = await self.store.get_setting(EXACT_EXPIRY, scope)
        return dict(found) if found else {}

    async def _set_expiry(self, scope: Scope, handle: int, seconds: int, now: datetime) -> None:
        table = await self._expiry(scope)
        if seconds > 0:
            table[str(handle)] = (now + timedelta(seconds=seconds)).timestamp()
        else:
            table.pop(str(handle), None)
        await self.store.set_setting(EXACT_EXPIRY, scope, table)

    async def memories(self, speaker: Speaker) -> list[Memory]:
        """The speaker's live memories; those past their exact lifetime are forgotten here."""
        scope = speaker.scope
        now = self._clock()
        found = [m for m in await self.engine.memories(scope) if not m.is_expired(now)]
        table = await self._expiry(scope)
        gone = [m.id for m in found if table.get(str(m.id), float("inf")) <= now.timestamp()]
        if gone:
            await self.engine.forget(scope, gone, reason="expired")
            for handle in gone:
                table.pop(str(handle), None)
            await self.store.set_setting(EXACT_EXPIRY, scope, table)
        return [m for m in found if m.id not in gone]

    # ---- what a request is told ----------------------------------------------------------------------

    async def reference(self, speaker: Speaker, text: str) -> str | None:
        """The block for this request: the speaker's memories and the ones this text recalls, fenced."""
        if self.options.inject_limit <= 0:
            return None
        memories = await self.memories(speaker)
        if not memories:
            return None
        shown = for_prompt(memories, self.options.inject_limit)
        lines = [*await self._profile_lines(speaker.scope, text), texts.HEADER,
                 *(f"- [{m.id}] {m.shown}" for m in shown)]
        cue = await self._cue(speaker, memories)
        if cue is not None:
            lines += [followups.CUE_HEADER, f"- {followups.cue_text(cue)}"]
        if self.options.recall_limit and text.strip():
            live = {m.id for m in memories}
            ids = {m.id for m in shown}
            recalled = [r.memory for r in await self.engine.recall(speaker.scope, text, self._clock(), allowed=live)
                        if r.memory.id not in ids]
            if recalled:
                lines += [texts.RECALLED, *(f"- [{m.id}] {m.shown}" for m in recalled)]
        return fenced("\n".join(lines))

    async def _cue(self, speaker: Speaker, memories: Sequence[Memory]) -> Memory | None:
        """At a private conversation's start (the speaker silent for ``CONVERSATION_GAP``), one told event
        to follow up, as the Telegram bot's first reply carries it; the counts stay in a setting."""
        if speaker.in_group:
            return None
        scope, now = speaker.scope, self._clock()
        said = (await self.engine.followups.state(scope)).said_at
        if said is not None and now - said <= CONVERSATION_GAP:
            return None
        cued = {int(h): int(n) for h, n in (await self.store.get_setting(FOLLOWUP_CUES, scope) or {}).items()}
        memory = await self.engine.followups.cue(scope, memories, now, cued)
        if memory is not None:
            cued[memory.id] = cued.get(memory.id, 0) + 1
            await self.store.set_setting(FOLLOWUP_CUES, scope, {str(h): n for h, n in cued.items()})
        return memory

    async def heard(self, speaker: Speaker, address: str) -> None:
        """The speaker said something: kept, so a follow-up is not written first on a day they wrote and the
        next conversation's start is known; a private chat's ``address`` is where follow-ups go."""
        scope, now = speaker.scope, self._clock()
        await self.engine.write_turn(scope, now, conversation="", said=True)
        if not speaker.in_group and address and self._addressed.get(scope) != address:
            # Every private speaker is in "companion mode" here: the follow-up round's read looks for those.
            await self.engine.set_active(scope, True, now)
            await self.store.set_setting(HOST_ADDRESS, scope, address)
            self._addressed[scope] = address

    async def _profile_lines(self, scope: Scope, text: str) -> list[str]:
        """The speaker's profile as the Telegram bot tells it: the core always, the traits this text touches."""
        profile = await self.engine.profile(scope) if self.options.profile else None
        if profile is None:
            return []
        lines = [texts.PROFILE.format(core=profile.core)] if profile.core else []
        traits = matching_traits(profile, self.engine.keywords.keywords(text)) if text.strip() else []
        return [*lines, *([texts.TRAITS, *(f"- {t}" for t in traits)] if traits else [])]

    # ---- the model's tools ---------------------------------------------------------------------------

    async def add(self, speaker: Speaker, content: object, importance: object = 5, valid_time: object = 0,
                  kind: object = "fact", origin: Origin = Origin.TOOL, *, date: object = "", end_date: object = "",
                  yearly: object = False) -> Memory:
        text, weight, seconds, mtype = content_of(content), importance_of(importance), seconds_of(valid_time), \
            type_of(kind)
        now = self._clock()
        await self._label(speaker)
        # Lasting memories stay medium-term, where the capacity counts them (the per-user design evicts any
        # memory); a move to long-term (the tool) exempts one.
        today = now.astimezone(self.engine.config.tz).date()
        dated = dates.resolve_for(mtype, text, today)  # "下周三": its date
        # The model's own ISO date wins over words read in the text; a wrong one is dropped, never guessed.
        given = dates.model_when({"date": date, "end_date": end_date,
                                  "yearly": yearly is True or str(yearly).lower() == "true"}, today)
        draft = MemoryDraft(event=dated.text, keywords=self.engine.keywords.keywords(dated.text), importance=weight,
                            validity=validity_for(seconds), type=mtype, origin=origin, source_at=now,
                            tier=Tier.MEDIUM if seconds <= 0 else None, happens=given or dated.when)
        memory = await self.engine.save_draft(speaker.scope, draft, now)
        await self._set_expiry(speaker.scope, memory.id, seconds, now)
        return memory

    async def search(self, speaker: Speaker, query: object) -> list[Memory]:
        words = " ".join(str(query or "").split())[:200]
        if not words:
            return []
        live = {m.id for m in await self.memories(speaker)}
        found = await self.engine.search(speaker.scope, words, self._clock(), limit=MAX_SEARCH, use=True)
        return [m for m in found if m.id in live]

    async def update(self, speaker: Speaker, handle: object, content: object,
                     importance: object | None = None) -> Memory:
        number, text = handle_of(handle), content_of(content)
        weight = None if importance in (None, "", 0) else importance_of(importance)
        return await self.engine.edit(speaker.scope, number, text, self._clock(), importance=weight)

    async def forget(self, speaker: Speaker, target: object) -> int:
        """``all``, a handle, or a description (the memories a search for it finds)."""
        said = " ".join(str(target or "").split())
        if not said:
            raise BadArgument("请说明要忘掉哪条（编号、描述或 all）")
        if said.lower() in ("all", "全部"):
            return await self.engine.forget(speaker.scope, None)
        if said.lstrip("#").isdigit():
            await self.engine.get(speaker.scope, handle_of(said))
            return await self.engine.forget(speaker.scope, [handle_of(said)])
        found = await self.search(speaker, said)
        return await self.engine.forget(speaker.scope, [m.id for m in found[:3]]) if found else 0

    async def listing(self, speaker: Speaker, kind: object = "") -> list[Memory]:
        memories = await self.memories(speaker)
        if kind:
            wanted = type_of(kind)
            memories = [m for m in memories if m.type is wanted]
        return for_prompt(memories, MAX_LIST)

    async def move(self, speaker: Speaker, handle: object, tier: object) -> Memory:
        try:
            target = Tier(str(tier).strip().lower())
        except ValueError:
            raise BadArgument("tier 应为 short / medium / long") from None
        return await self.engine.move(speaker.scope, handle_of(handle), target, self._clock())

    async def archive(self, speaker: Speaker, handle: object) -> Memory:
        return await self.engine.archive(speaker.scope, handle_of(handle), self._clock())

    async def due(self, speaker: Speaker) -> list[Memory]:
        return [m for m, _ in await self.engine.due_reviews(speaker.scope, self._clock())]

    # ---- admin ---------------------------------------------------------------------------------------

    async def drop(self, speaker: Speaker, handle: object) -> bool:
        number = handle_of(handle)
        try:
            await self.engine.get(speaker.scope, number)
        except (MemoryNotFoundError, NotYourMemoryError):
            return False
        return await self.engine.forget(speaker.scope, [number], reason="admin") > 0

    async def export_csv(self, keyword: str = "", folder: Path | None = None) -> tuple[Path, int]:
        """Every scope's active memories (those naming ``keyword`` when given) as a CSV with a BOM, which
        Excel opens as UTF-8."""
        now = self._clock()
        rows: list[list[str]] = []
        for scope in await self.store.scopes():
            label = await self.store.get_setting(HOST_LABEL, scope) or scope.key
            expiry = await self._expiry(scope)
            for m in await self.engine.memories(scope):
                if m.is_expired(now) or (keyword and keyword not in m.event):
                    continue
                until = expiry.get(str(m.id))
                expires = datetime.fromtimestamp(until, UTC) if until else m.expires_at
                rows.append([label, str(m.id), m.type.value, m.tier.value, f"{m.importance / 10:g}", m.event,
                             _iso(m.created_at), _iso(m.updated_at), _iso(m.last_accessed_at), _iso(expires)])
        target = (folder or self.data_dir / "exports") / f"memories-{now:%Y%m%d-%H%M%S}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(CSV_FIELDS)
        writer.writerows(rows)
        await asyncio.to_thread(target.write_text, buffer.getvalue(), encoding="utf-8-sig")
        return target, len(rows)

    # ---- learning from the conversation -----------------------------------------------------------

    async def note_exchange(self, speaker: Speaker, user: str, reply: str) -> None:
        """Queue a finished exchange; enough queued starts one extraction in the background, which rebuilds
        the profile after. Otherwise the profile is rebuilt when due, as the Telegram bot does after a turn
        (none yet, a day old, or changed memories and six hours since the last build)."""
        if not self.engine.can_extract or not user.strip():
            return
        scope = speaker.scope
        if self.options.learning:
            await self._label(speaker)
            # As the bot's pipeline takes a message: no NUL or lone surrogate reaches the store (PostgreSQL).
            turn = Turn(user=sendable(user[:2000]), reply=sendable(reply[:2000]), at=self._clock())
            await self.engine.note_turn(scope, turn)
            if scope not in self._learning and await self.engine.pending_count(scope) >= self.options.learn_every:
                self._learning.add(scope)
                self._spawn(self._learn(scope))
                return
        if self.options.profile and scope not in self._refreshing and scope not in self._learning:
            self._spawn(self._refresh_profile(scope))

    async def _learn(self, scope: Scope) -> None:
        try:
            await self.engine.consolidate(scope, self._clock())
        except LLMError as exc:
            log.warning("learning for a scope failed (turns stay queued): %s", exc)
            return
        finally:
            self._learning.discard(scope)
        if self.options.profile:
            await self._refresh_profile(scope)

    async def _refresh_profile(self, scope: Scope) -> None:
        if scope in self._refreshing:
            return
        self._refreshing.add(scope)
        try:
            await self.engine.refresh_profile(scope, self._clock())
        except LLMError as exc:
            log.warning("profile rebuild for a scope failed, the last one stays: %s", exc)
        finally:
            self._refreshing.discard(scope)

    # ---- the weekly summary -------------------------------------------------------------------------

    async def set_weekly(self, speaker: Speaker, on: bool, address: str) -> None:
        """Opt in or out; ``address`` is where AstrBot reaches the speaker (their private chat's origin)."""
        await self._label(speaker)
        await self.store.set_setting(WEEKLY, speaker.scope, on)
        if on:
            await self.store.set_setting(HOST_ADDRESS, speaker.scope, address)

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait for background learning (tests, shutdown)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    # ---- nightly upkeep --------------------------------------------------------------------------

    async def nightly(self) -> Path | None:
        """Daily decay (when on) and a CSV backup of every memory, keeping the newest ``backup_keep``."""
        if self.options.decay:
            await self.engine.decay(self._clock())
        if self.options.backup_keep <= 0:
            return None
        folder = self.data_dir / "backups"
        path, _ = await self.export_csv(folder=folder)
        for old in sorted(folder.glob("memories-*.csv"))[:-self.options.backup_keep]:
            old.unlink(missing_ok=True)
        return path

    def next_nightly(self, now: datetime) -> datetime:
        return next_at(now, self.options.tz, self.options.backup_time)


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
