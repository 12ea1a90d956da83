"""The conversation pipeline, shared by Telegram and the console: one user turn in, one reply out.

Short-term memory (the last turns, recall cooldowns, the extraction countdown) lives here, in the
process. Long-term memory goes through the engine. Extraction and profile rebuilds run in background
tasks after the reply, so the user never waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from companion.chat import texts
from companion.chat.persona import render_system_prompt
from companion.config.settings import Settings
from companion.core import rules
from companion.core.errors import CompanionError, LLMError, StorageError
from companion.core.models import Scope, Turn
from companion.core.timeutil import utcnow
from companion.llm.client import LLMClient, Message
from memory import MemoryContext, MemoryEngine

log = logging.getLogger(__name__)

INJECTION_WINDOW = 10
NEWS_QUIET_TURNS = 12  # an important word triggers again only after this many turns
NEWS_MIN_GAP = 3  # turns since the last extraction before news triggers another one


@dataclass(frozen=True, slots=True)
class ChatConfig:
    history_turns: int = 10
    recall_max_rate: float = 0.2
    extract_every_min: int = 8
    extract_every_max: int = 12
    important_keywords: tuple[str, ...] = ()
    tz: tzinfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))

    @classmethod
    def from_settings(cls, settings: Settings) -> ChatConfig:
        low, high = sorted((settings.extract_every_min, settings.extract_every_max))
        return cls(
            history_turns=settings.history_turns,
            recall_max_rate=settings.recall_max_rate,
            extract_every_min=low,
            extract_every_max=high,
            important_keywords=tuple(settings.important_keywords),
            tz=settings.tz,
        )


@dataclass(slots=True)
class Session:
    history: deque[tuple[str, str | None]]
    extract_at: int
    turn: int = 0
    since_extraction: int = 0
    cooldown: dict[int, int] = field(default_factory=dict)
    injections: deque[bool] = field(default_factory=lambda: deque(maxlen=INJECTION_WINDOW))
    news_turns: dict[str, int] = field(default_factory=dict)
    news_waiting: bool = False
    last_extraction_turn: int | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    ok: bool
    recalled: tuple[int, ...] = ()
    mentioned: tuple[int, ...] = ()


class ChatService:
    def __init__(
        self, engine: MemoryEngine, llm: LLMClient, config: ChatConfig, *,
        clock: Callable[[], datetime] = utcnow, rng: random.Random | None = None,
    ) -> None:
        self.engine = engine
        self.llm = llm
        self.config = config
        self.clock = clock
        self._rng = rng or random.Random()
        self._sessions: dict[Scope, Session] = {}
        self._active: set[Scope] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._refreshing: set[Scope] = set()

    async def load(self) -> None:
        """Companion mode survives restarts: read who had it on."""
        self._active = await self.engine.active_scopes()

    def is_active(self, scope: Scope) -> bool:
        return scope in self._active

    def session(self, scope: Scope) -> Session:
        session = self._sessions.get(scope)
        if session is None:
            session = Session(history=deque(maxlen=self.config.history_turns), extract_at=self._next_extraction())
            self._sessions[scope] = session
        return session

    def _next_extraction(self) -> int:
        return self._rng.randint(self.config.extract_every_min, self.config.extract_every_max)

    # ---- commands --------------------------------------------------------------------------------

    async def start(self, scope: Scope) -> str:
        now = self.clock()
        await self.engine.set_active(scope, True, now)
        self._active.add(scope)
        try:
            await self.engine.refresh_profile(scope, now, force=True)
        except LLMError as exc:
            log.warning("profile build failed for %s, keeping the last one: %s", scope.key, exc)
        known = bool(await self.engine.memories(scope))
        return texts.GREETING_BACK if known else texts.GREETING_NEW

    async def stop(self, scope: Scope) -> str:
        """Short-term context and caches go; long-term memory and queued turns stay (extracted later)."""
        # Flip the flag before any await: a message handled concurrently must already see "off".
        self._active.discard(scope)
        self._sessions.pop(scope, None)
        await self.engine.set_active(scope, False, self.clock())
        self._spawn(self._consolidate(scope), f"extract-{scope.key}")
        return texts.STOPPED

    # ---- one turn --------------------------------------------------------------------------------

    async def reply(self, scope: Scope, text: str) -> Reply:
        session = self.session(scope)
        async with session.lock:
            return await self._reply(scope, session, text)

    async def _reply(self, scope: Scope, session: Session, text: str) -> Reply:
        now = self.clock()
        session.turn += 1
        allow = rules.recall_allowed(list(session.injections), self.config.recall_max_rate, INJECTION_WINDOW)
        try:
            context = await self.engine.build_context(
                scope, text, now, turn=session.turn, cooldown=session.cooldown, allow_recall=allow,
                earlier=[user for user, _ in session.history],
                reply=session.history[-1][1] if session.history else None,
            )
        except StorageError as exc:
            # A locked or failing database must not silence the companion: answer without memory.
            log.warning("memory unavailable for %s, answering without it: %s", scope.key, exc)
            context = MemoryContext()
        for recalled in context.recalled:
            session.cooldown[recalled.memory.id] = session.turn
        session.injections.append(bool(context.recalled))
        messages = [
            {"role": "system", "content": render_system_prompt(context, now, self.config.tz)},
            *history_messages(session.history),
        ]
        messages = merge_user_message(messages, text)
        answer: str | None
        try:
            answer = await self.llm.chat(messages, purpose="reply")
        except LLMError as exc:
            log.warning("reply failed for %s: %s", scope.key, exc)
            answer = None
        session.history.append((text, answer))
        recalled_ids = tuple(r.memory.id for r in context.recalled)
        try:
            await self.engine.note_turn(scope, Turn(user=text, reply=answer, at=now))
            mentioned = await self.engine.mark_mentioned(scope, answer, context.recalled, now) if answer else []
        except StorageError as exc:
            log.warning("could not record the turn for %s: %s", scope.key, exc)
            mentioned = []
        if answer is None:
            return Reply(texts.LLM_DOWN, ok=False, recalled=recalled_ids)
        self._after_turn(scope, session, text, now)
        return Reply(answer, ok=True, recalled=recalled_ids, mentioned=tuple(mentioned))

    def _after_turn(self, scope: Scope, session: Session, text: str, now: datetime) -> None:
        session.since_extraction += 1
        session.news_waiting |= self._is_news(session, text)
        # News told in quick succession ("感冒了……还有我要搬家了") shares one extraction call.
        last = session.last_extraction_turn
        news_due = session.news_waiting and (last is None or session.turn - last >= NEWS_MIN_GAP)
        if news_due or session.since_extraction >= session.extract_at:
            session.news_waiting = False
            session.last_extraction_turn = session.turn
            session.since_extraction = 0
            session.extract_at = self._next_extraction()
            self._spawn(self._consolidate(scope), f"extract-{scope.key}")
        elif scope not in self._refreshing:
            self._spawn(self._refresh_profile(scope, now), f"profile-{scope.key}")

    def _is_news(self, session: Session, text: str) -> bool:
        """An important word extracts at once the first time; talking on about the same thing (a cold
        over several turns) waits for the regular extraction instead of paying for one per turn."""
        news = [
            word for word in self.config.important_keywords
            if word in text and session.turn - session.news_turns.get(word, -NEWS_QUIET_TURNS) >= NEWS_QUIET_TURNS
        ]
        for word in news:
            session.news_turns[word] = session.turn
        return bool(news)

    # ---- background work -------------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _consolidate(self, scope: Scope) -> None:
        try:
            while True:
                result = await self.engine.consolidate(scope, self.clock())
                if result.turns < self.engine.extract_batch:
                    break
        except LLMError as exc:
            log.warning("extraction for %s failed, turns stay queued: %s", scope.key, exc)
            return
        except CompanionError:
            log.exception("extraction for %s failed", scope.key)
            return
        await self._refresh_profile(scope, self.clock())

    async def _refresh_profile(self, scope: Scope, now: datetime) -> None:
        if scope in self._refreshing:
            return
        self._refreshing.add(scope)
        try:
            await self.engine.refresh_profile(scope, now)
        except LLMError as exc:
            log.warning("profile refresh for %s failed, keeping the last one: %s", scope.key, exc)
        except CompanionError:
            log.exception("profile refresh for %s failed", scope.key)
        finally:
            self._refreshing.discard(scope)

    async def drain(self) -> None:
        """Wait for background extractions and profile rebuilds (shutdown, tests, benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def history_messages(history: Sequence[tuple[str, str | None]]) -> list[Message]:
    """Past turns as chat messages; a turn that got no reply folds into the next user message."""
    messages: list[Message] = []
    waiting: list[str] = []
    for user, reply in history:
        waiting.append(user)
        if reply is not None:
            messages.append({"role": "user", "content": "\n".join(waiting)})
            messages.append({"role": "assistant", "content": reply})
            waiting = []
    if waiting:
        messages.append({"role": "user", "content": "\n".join(waiting)})
    return messages


def merge_user_message(messages: list[Message], text: str) -> list[Message]:
    if messages and messages[-1]["role"] == "user":
        return [*messages[:-1], {"role": "user", "content": f"{messages[-1]['content']}\n{text}"}]
    return [*messages, {"role": "user", "content": text}]
