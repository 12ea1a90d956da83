"""The plugin's behaviour on the engine, free of AstrBot: what a request is told, the model's memory tools
(the engine's own: ``tools``), the users' and admins' commands, exports, backups, learning and daily upkeep.
Every call names a ``Speaker`` taken from the event in code; nothing a model or a user types can name
another scope, bar an admin command. The engine is the only door to the memories (its ``settings`` hold
the plugin's own state beside them); the learning cadence and the weekly rule are every host's
(``engine.cadence``, ``engine.weekly``), the CSV the Telegram bot's export.

Exact lifetimes (the per-user design's ``valid_time`` in seconds) are the memory's own end
(``MemoryDraft.expires_at``); the per-scope table earlier versions kept beside the memories is still
honoured: a memory past its time there is forgotten the next time its scope is read."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from companion.core import dates
from companion.core import followup_rules as followups
from companion.core.csvexport import export_csv_bytes
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Turn
from companion.core.setting import EXACT_EXPIRY, FOLLOWUP_CUES, HOST_ADDRESS, HOST_LABEL, WEEKLY
from companion.core.text import sendable
from companion.core.timeutil import utcnow
from companion.engine.cadence import Cadence, Countdown
from companion.engine.profile import matching_traits
from companion.engine.tools import lifetime_validity
from companion.engine.weekly import next_at
from companion.hosts.astrbot import replies as texts
from companion.hosts.astrbot.arguments import (
    content_of,
    handle_of,
    importance_of,
    seconds_of,
    type_of,
)
from companion.hosts.astrbot.fences import fenced
from companion.hosts.astrbot.options import Options
from companion.hosts.astrbot.scopes import Speaker
from companion.llm.jsonmodel import JsonModel
from companion.llm.toolkit import ToolFactory
from companion.recall.keywords import KeywordExtractor
from memory import MemoryEngine

log = logging.getLogger(__name__)

TYPE_ORDER = {MemoryType.INSTRUCTION: 0, MemoryType.PREFERENCE: 1, MemoryType.FACT: 2, MemoryType.EVENT: 3}
MAX_LIST = 30
MAX_SEARCH = 10
CONVERSATION_GAP = timedelta(hours=12)  # silence that makes the next message a new conversation (the bot's)
EXPORTED = frozenset(Status) - {Status.FORGOTTEN}  # what the Telegram bot's export holds


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
    def __init__(self, engine: MemoryEngine, options: Options, data_dir: Path,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.options = options
        self.data_dir = data_dir
        self.tools: ToolFactory = engine.tools()  # the model's memory tools, built per call for its scope
        self._clock = clock
        self._labelled: set[str] = set()
        self._addressed: dict[Scope, str] = {}  # private scopes whose address this process has stored
        # The Telegram bot's cadence, counted in exchanges (AstrBot keeps no session of ours to count in).
        self.cadence = Cadence(engine, clock, random.Random(), extract_every=(options.learn_every,) * 2,
                               important_keywords=engine.config.important_keywords)
        self._counts: dict[Scope, Countdown] = {}

    @classmethod
    async def open(cls, data_dir: Path, options: Options, llm: JsonModel | None,
                   clock: Callable[[], datetime] = utcnow) -> MemoryService:
        data_dir.mkdir(parents=True, exist_ok=True)
        from companion.llm.embeddings import E5Embedder, Embedder, OpenAIEmbedder, builtin_embedder

        embedder: Embedder | None = None
        if options.embedding_base_url and options.embedding_model:
            embedder = OpenAIEmbedder(base_url=options.embedding_base_url, model=options.embedding_model,
                                      api_key=options.embedding_api_key)
        elif options.semantic:
            embedder = builtin_embedder("in AstrBot's Python")
        config = options.engine_config(builtin=isinstance(embedder, E5Embedder))
        engine = await MemoryEngine.open(options.database_url(data_dir), config, KeywordExtractor(), llm,
                                         embedder=embedder, clock=clock)
        return cls(engine, options, data_dir, clock)

    def now(self) -> datetime:
        return self._clock()

    async def close(self) -> None:
        self.cadence.cancel()
        await self.cadence.drain()
        await self.engine.close()

    # ---- reading a scope ---------------------------------------------------------------------------

    async def _label(self, speaker: Speaker) -> None:
        key = speaker.scope.key
        if key not in self._labelled:
            await self.engine.settings.set(HOST_LABEL, speaker.scope, speaker.label)
            self._labelled.add(key)

    async def _expiry(self, scope: Scope) -> dict[str, float]:
        """Earlier versions' exact lifetimes (handle -> unix time); new ones are the memory's own end."""
        found: dict[str, float] | None = await self.engine.settings.get(EXACT_EXPIRY, scope)
        return dict(found) if found else {}

    async def memories(self, speaker: Speaker) -> list[Memory]:
        """The speaker's live memories; those past an exact lifetime of the earlier table are forgotten here."""
        scope = speaker.scope
        now = self._clock()
        found = [m for m in await self.engine.memories(scope) if not m.is_expired(now)]
        table = await self._expiry(scope)
        gone = [m.id for m in found if table.get(str(m.id), float("inf")) <= now.timestamp()]
        if gone:
            await self.engine.forget(scope, gone, reason="expired")
            for handle in gone:
                table.pop(str(handle), None)
            await self.engine.settings.set(EXACT_EXPIRY, scope, table)
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
        cued = {int(h): int(n) for h, n in (await self.engine.settings.get(FOLLOWUP_CUES, scope) or {}).items()}
        memory = await self.engine.followups.cue(scope, memories, now, cued)
        if memory is not None:
            cued[memory.id] = cued.get(memory.id, 0) + 1
            await self.engine.settings.set(FOLLOWUP_CUES, scope, {str(h): n for h, n in cued.items()})
        return memory

    async def heard(self, speaker: Speaker, address: str) -> None:
        """The speaker said something: kept, so a follow-up is not written first on a day they wrote and the
        next conversation's start is known; a private chat's ``address`` is where follow-ups go."""
        scope, now = speaker.scope, self._clock()
        await self.engine.write_turn(scope, now, conversation="", said=True)
        if not speaker.in_group and address and self._addressed.get(scope) != address:
            # Every private speaker is in "companion mode" here: the follow-up round's read looks for those.
            await self.engine.set_active(scope, True, now)
            await self.engine.settings.set(HOST_ADDRESS, scope, address)
            self._addressed[scope] = address

    async def _profile_lines(self, scope: Scope, text: str) -> list[str]:
        """The speaker's profile as the Telegram bot tells it: the core always, the traits this text touches."""
        profile = await self.engine.profile(scope) if self.options.profile else None
        if profile is None:
            return []
        lines = [texts.PROFILE.format(core=profile.core)] if profile.core else []
        traits = matching_traits(profile, self.engine.keywords.keywords(text)) if text.strip() else []
        return [*lines, *([texts.TRAITS, *(f"- {t}" for t in traits)] if traits else [])]

    # ---- the admins' and users' commands --------------------------------------------------------------

    async def add(self, speaker: Speaker, content: object, importance: object = 5, valid_time: object = 0,
                  kind: object = "fact", origin: Origin = Origin.EXPLICIT) -> Memory:
        """An admin's ``/增加记忆``: the designs' 1-10 importance and lifetime in seconds (0: lasting)."""
        text, weight, seconds, mtype = content_of(content), importance_of(importance), seconds_of(valid_time), \
            type_of(kind)
        now = self._clock()
        await self._label(speaker)
        # Lasting memories stay medium-term, where the capacity counts them (the per-user design evicts any
        # memory).
        dated = dates.resolve_for(mtype, text, now.astimezone(self.engine.config.tz).date())  # "下周三": its date
        draft = MemoryDraft(event=dated.text, keywords=self.engine.keywords.keywords(dated.text), importance=weight,
                            validity=lifetime_validity(seconds), type=mtype, origin=origin, source_at=now,
                            tier=Tier.MEDIUM if seconds <= 0 else None, happens=dated.when,
                            expires_at=now + timedelta(seconds=seconds) if seconds > 0 else None)
        return await self.engine.save_draft(speaker.scope, draft, now)

    async def update(self, speaker: Speaker, handle: object, content: object,
                     importance: object | None = None) -> Memory:
        number, text = handle_of(handle), content_of(content)
        weight = None if importance in (None, "", 0) else importance_of(importance)
        return await self.engine.edit(speaker.scope, number, text, self._clock(), importance=weight)

    async def listing(self, speaker: Speaker, kind: object = "") -> list[Memory]:
        memories = await self.memories(speaker)
        if kind:
            wanted = type_of(kind)
            memories = [m for m in memories if m.type is wanted]
        return for_prompt(memories, MAX_LIST)

    # ---- admin ---------------------------------------------------------------------------------------

    async def drop(self, speaker: Speaker, handle: object) -> bool:
        number = handle_of(handle)
        try:
            await self.engine.get(speaker.scope, number)
        except (MemoryNotFoundError, NotYourMemoryError):
            return False
        return await self.engine.forget(speaker.scope, [number], reason="admin") > 0

    async def export_csv(self, keyword: str = "", folder: Path | None = None) -> tuple[Path, int]:
        """Every scope's memories but the forgotten (those naming ``keyword`` when given) in the Telegram bot's
        export format, each scope named as the plugin labelled it."""
        now = self._clock()
        word = keyword.lower()
        rows: list[tuple[Scope, Memory]] = []
        labels: dict[Scope, str] = {}
        for scope in await self.engine.scopes():
            labels[scope] = await self.engine.settings.get(HOST_LABEL, scope) or scope.key
            rows += [(scope, m) for m in await self.engine.memories(scope, EXPORTED)
                     if not word or word in m.event.lower() or any(word in k.lower() for k in m.keywords)]
        data, count = export_csv_bytes(rows, self.options.tz, scope_name=labels.__getitem__)
        target = (folder or self.data_dir / "exports") / f"memories-{now:%Y%m%d-%H%M%S}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(target.write_bytes, data)
        return target, count

    # ---- learning from the conversation -----------------------------------------------------------

    async def note_exchange(self, speaker: Speaker, user: str, reply: str) -> None:
        """Queue a finished exchange and count it (the Telegram bot's cadence: every ``learn_every`` exchanges,
        or at once on news); a due extraction runs in the background and rebuilds the profile after. Any
        other exchange rebuilds a due profile: here memories come from commands and tools as much as from
        learning (none yet, a day old, or changed memories and six hours since the last build)."""
        if not self.engine.can_extract or not user.strip():
            return
        scope = speaker.scope
        if self.options.learning:
            await self._label(speaker)
            # As the bot's pipeline takes a message: no NUL or lone surrogate reaches the store (PostgreSQL).
            turn = Turn(user=sendable(user[:2000]), reply=sendable(reply[:2000]), at=self._clock())
            await self.engine.note_turn(scope, turn)
            count = self._counts.setdefault(scope, self.cadence.countdown())
            count.turn += 1
            if await self.cadence.count_turn(self.engine.unread_turn(scope), count, turn.user):
                self.cadence.extract(scope)
                return
        if self.options.profile:
            self.cadence.refresh_profile(scope)

    # ---- the weekly summary -------------------------------------------------------------------------

    async def set_weekly(self, speaker: Speaker, on: bool, address: str) -> None:
        """Opt in or out; ``address`` is where AstrBot reaches the speaker (their private chat's origin)."""
        await self._label(speaker)
        await self.engine.settings.set(WEEKLY, speaker.scope, on)
        if on:
            await self.engine.settings.set(HOST_ADDRESS, speaker.scope, address)
            # The weekly round reads the scopes in companion mode, as every private speaker's is here.
            await self.engine.set_active(speaker.scope, True, self._clock())

    async def wait_idle(self) -> None:
        """Wait for background learning (tests, shutdown)."""
        await self.cadence.drain()

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

