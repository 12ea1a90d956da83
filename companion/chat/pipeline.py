"""The conversation pipeline, shared by Telegram and the console: one user turn in, one reply out.

Short-term memory (the last turns, recall cooldowns, the extraction countdown) lives here, in the
process, cached: each turn's one write keeps it in the store and a session new to this process reads it
back, so another worker process continues the conversation (``Session.state``). Long-term memory goes
through the engine; what each turn hands to it, and when extraction and
profile rebuilds run (background tasks after the reply, so the user never waits), is ``learning``.

A reply call is laid out for DeepSeek's prefix cache (``prompt``). When tools are on and a ``ToolFactory``
is given, the reply runs the bounded tool loop with tools built for this turn's scope; otherwise it is the
plain chat call, with no tools field.
"""

from __future__ import annotations

import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime

from companion.chat import texts
from companion.chat.followers import RoomsFollow, SessionsFollow, SpoolsFollow
from companion.chat.group import GroupTurn, Rooms
from companion.chat.hinting import Hints
from companion.chat.learning import Learning
from companion.chat.modes import CompanionModes
from companion.chat.prompt import history_excess, render_reference, reply_messages
from companion.chat.requests import opening_reviews, steer
from companion.chat.session import (
    INJECTION_WINDOW,
    Session,
    Told,
    current_turns,
    new_turn_key,
    said_since,
    stored_turn,
)
from companion.chat.summaries import Summaries
from companion.chat.types import ChatConfig, Reply
from companion.core import rules
from companion.core.errors import LLMError, StorageError
from companion.core.models import Scope, ShortKind, Turn
from companion.core.spools import TurnSpools
from companion.core.text import sendable
from companion.core.timeutil import utcnow
from companion.engine.tools import SOURCE_TURN
from companion.llm.client import LLMClient
from companion.llm.loop import run_tool_loop
from companion.llm.toolkit import ToolFactory, Toolset
from memory import MemoryContext, MemoryEngine, MemoryTurn

log = logging.getLogger(__name__)

# A reply is at most this long: max_tokens keeps real ones near 1,000 characters, but a broken endpoint may
# send megabytes, which would be hundreds of Telegram messages and a huge short-term turn.
REPLY_MAX_CHARS = 3 * texts.TELEGRAM_LIMIT

# A message written first: composed from the conversation's current turns (None: not now), then delivered.
Compose = Callable[[list[tuple[str, str | None]]], Awaitable[str | None]]
Deliver = Callable[[str], Awaitable[bool]]


class ChatService:
    def __init__(
        self, engine: MemoryEngine, llm: LLMClient, config: ChatConfig, *,
        clock: Callable[[], datetime] = utcnow, rng: random.Random | None = None,
        tools: ToolFactory | None = None, spools: TurnSpools | None = None,
    ) -> None:
        """``spools``: where turns the database cannot take wait on disk (``core.spools``,
        opened by the composition root)."""
        self.engine = engine
        self.llm = llm
        self.config = config
        self.clock = clock
        self._rng = rng or random.Random()
        self._sessions: dict[Scope, Session] = {}
        self.modes = CompanionModes(engine)
        self._summaries = Summaries(engine, clock, config.idle_summary_seconds, self._sessions.get)
        self._learning = Learning(engine, clock, self._rng, important_keywords=config.important_keywords,
                                  extract_every=(config.extract_every_min, config.extract_every_max), spools=spools)
        # The copies of what was said follow every forget, whoever asks for it (``chat.followers``): the
        # sessions first, then the spool files, this process's of which mirrors the sessions.
        engine.follow(SessionsFollow(self._sessions, self._summaries.cancel))
        engine.follow(SpoolsFollow(self._learning, self._sessions))
        self.rooms = Rooms()  # each group's recent lines, which the group's replies quote (``chat.group``)
        engine.follow(RoomsFollow(self.rooms))
        self._tools = tools if config.tools_enabled else None
        self.hints = Hints(engine, clock)  # "how to start" hints to people outside companion mode, rate-limited

    async def load(self) -> None:
        """Companion mode survives restarts: read who had it on."""
        await self.modes.load()

    async def replay_spools(self) -> int:
        """Queue what stopped or crashed processes left spooled (``Learning.replay_spools``), and try again
        the turns this process spooled for conversations not busy now (their users may not write again)."""
        queued = await self._learning.replay_spools()
        for scope in self._learning.spooled():
            session = self._sessions.get(scope)
            if session is not None and not session.lock.locked():
                async with session.lock:
                    await self._learning.queue_waiting(scope, session)
        return queued

    def is_active(self, scope: Scope) -> bool:
        """Companion mode as this process last saw it (``modes``); ``active`` asks the store when off."""
        return self.modes.is_on(scope)

    async def active(self, scope: Scope) -> bool:
        return await self.modes.check(scope)

    def moved(self, old: Scope, new: Scope) -> None:
        """The store moved ``old`` to ``new`` (a group became a supergroup): companion mode follows, and
        both sessions go, so the next turn restores the moved short-term turns from the database."""
        self.modes.moved(old, new)
        self._sessions.pop(old, None)
        self._sessions.pop(new, None)

    async def taken_over(self, which: Callable[[Scope], bool]) -> None:
        """This process takes over the chats ``which`` picks from another worker: their companion mode and
        conversations are read again from the store (a session cached here may be older than what the
        other worker wrote since); a session answering a turn now stays."""
        await self.modes.reload(which)
        for scope, session in list(self._sessions.items()):
            if which(scope) and not session.lock.locked():
                await self._learning.queue_waiting(scope, session)
                if self._sessions.get(scope) is session and not session.lock.locked():
                    del self._sessions[scope]

    def session(self, scope: Scope) -> Session:
        session = self._sessions.get(scope)
        if session is None:
            session = Session(history=deque(), extract_at=self._learning.next_extraction())
            self._sessions[scope] = session
        return session

    # ---- commands --------------------------------------------------------------------------------

    async def start(self, scope: Scope) -> str:
        now = self.clock()
        async with self.modes.switching(scope):
            await self.engine.set_active(scope, True, now)
            self.modes.set(scope, True)
        try:
            await self.engine.refresh_profile(scope, now, force=True)
        except LLMError as exc:
            log.warning("profile build failed for %s, keeping the last one: %s", scope.key, exc)
        known = bool(await self.engine.memories(scope))
        return texts.GREETING_BACK if known else texts.GREETING_NEW

    async def keeps_memory(self, scope: Scope) -> bool:
        """Whether the scope's turns are kept (a group may switch its memory off): as its last turn read it,
        else as stored now."""
        session = self._sessions.get(scope)
        if session is not None and session.view is not None:
            return session.view.group_memory
        return await self.engine.group_memory(scope)

    async def stop(self, scope: Scope, unanswered: Sequence[str] = ()) -> str:
        """Short-term context and caches go; long-term memory and queued turns stay (extracted later).

        ``unanswered``: what the user said in companion mode that will get no reply (they blocked the
        bot); it is queued for memory like any turn, so nothing said in companion mode is lost."""
        async with self.modes.switching(scope):
            # Flip the flag before any await: a message handled concurrently must already see "off".
            self.modes.set(scope, False)
            session = self._sessions.pop(scope, None)
            if session is not None:
                await self._learning.queue_waiting(scope, session)
            now = self.clock()
            for text in unanswered:
                await self.engine.note_turn(scope, Turn(user=text, reply=None, at=now))
            await self.engine.set_active(scope, False, now)
        await self._end_conversation(scope, now)
        self._learning.extract(scope)
        return texts.STOPPED

    # ---- one turn --------------------------------------------------------------------------------

    async def reply(
        self, scope: Scope, text: str, *, chat_id: int | None = None, message_id: int | None = None,
        group: GroupTurn | None = None,
    ) -> Reply:
        """One turn; ``group`` for an addressed message in a group chat (companion.chat.group)."""
        text = sendable(text)  # a lone surrogate would fail every model call and write of this turn
        session = self.session(scope)
        async with session.lock:
            memory = await self._open(scope, session)
            if memory is None:  # another process stopped companion mode meanwhile
                if group is None:
                    self._sessions.pop(scope, None)
                    return Reply(texts.NOT_STARTED, ok=False)
                memory = self.engine.unread_turn(scope)
            if group is not None:  # the group's switches, as this turn's read found them
                group = group.settled(session.view)
            remember = group is None or bool(group.remember)
            session.message = (chat_id, message_id)
            session.answering = new_turn_key()
            try:
                steered = await self._steer(scope, session, text) if remember else None
                if steered is not None:
                    return steered
                # Review lists are private matters: raised in private chats only.
                opening = await self._opening(scope, session) if group is None else None
                answer = await self._reply(memory, session, text, group)
            finally:
                session.answering = None
        if remember:
            self._summaries.schedule(scope, session)
        text = texts.plain(answer.text)
        return replace(answer, text=f"{opening}\n\n{text}" if opening and answer.ok else text)

    async def _open(self, scope: Scope, session: Session) -> MemoryTurn | None:
        """The turn, opened by its one read of the store (``MemoryEngine.open_turn``), whose view is kept as
        ``session.view``; the first message after a restart, or on another worker process, finds the last
        turns and the conversation's state there, not an empty session. An unread turn when the store cannot
        be read, None when it says another process stopped companion mode."""
        restoring = not session.restored
        session.restored = True
        session.view = None
        mark = self.modes.mark()
        try:
            memory = await self.engine.open_turn(scope, turns=self.config.history_turns if restoring else 0)
        except StorageError as exc:
            log.warning("short-term context of %s unavailable: %s", scope.key, exc)
            return self.engine.unread_turn(scope)
        view = memory.view
        assert view is not None  # an opened turn carries its read
        # Kept for this turn's decisions; the memories and turns read with it have their own homes.
        session.view = view if view.memories is None and not view.turns else replace(view, memories=None, turns=[])
        if self.modes.observe(scope, view.active, mark):
            return None
        session.steer.editing = view.editing
        if not restoring and (stored_turn(view.conversation) > session.turn or view.forgot > session.forgot_seen
                              or not session.restored):
            # Another process added to this conversation (the one that writes first), or forgot something in it
            # (a worker, the operator, the Dida365 sync), which its turns here may still hold: read it again.
            session.history.clear()
            session.restored = False
            return await self._open(scope, session)
        session.forgot_seen = view.forgot
        if restoring:
            session.resume(view.conversation)
        if restoring and not session.history:
            session.history.extend(Told(item.user, item.reply, item.keys[0] if item.keys else None, item.at)
                                   for item in view.turns)
            session.summarised_turn = len(session.history)
        return memory

    async def _steer(self, scope: Scope, session: Session, text: str) -> Reply | None:
        previous = session.history[-1] if session.history else None
        chat_id, message_id = session.message
        told = [key for key in (previous.key if previous else None, session.answering) if key]
        try:
            if session.steer.editing is not None:
                await self.engine.await_edit(scope, None)  # this message is the new text, whatever comes of it
            outcome = await steer(self.engine, scope, session.steer, text, previous.user if previous else None,
                                  self.clock(), chat_id=chat_id, message_id=message_id, turns=told)
        except StorageError as exc:
            log.warning("memory unavailable for %s while steering: %s", scope.key, exc)
            return Reply(texts.SAVE_FAILED, ok=False)
        if outcome is None:
            return None
        if outcome.saved is not None:
            self._record(session, text, outcome.text, session.answering)
        return Reply(outcome.text, ok=True, saved=outcome.saved, replaced=outcome.replaced,
                     to_forget=outcome.to_forget, forget_all=outcome.forget_all)

    async def _opening(self, scope: Scope, session: Session) -> str | None:
        """The first turn of a conversation in this process raises reviews the user left unanswered for
        days (``REVIEW_SENT``, which companion.ops.jobs.proactive writes, read with the turn)."""
        if session.reviews_looked:
            return None
        session.reviews_looked = True
        now = self.clock()
        try:
            sent = session.view.review_sent if session.view is not None else None
            unanswered = sent is not None and now - sent >= self.config.review_unanswered
            return await opening_reviews(self.engine, scope, session.steer, now, unanswered)
        except StorageError as exc:
            log.warning("reviews unavailable for %s: %s", scope.key, exc)
            return None

    async def write_first(self, scope: Scope, handle: int, compose: Compose, deliver: Deliver) -> bool:
        """A message the companion writes first about memory ``handle`` (a follow-up), composed from the
        conversation as it stands; ``deliver`` records it and sends it (False: not sent). A message sent
        becomes the conversation's latest turn, so the user's answer is read with it, in any process."""
        session = self.session(scope)
        async with session.lock:
            memory = await self._open(scope, session)
            if memory is None or memory.view is None:
                return False
            now = self.clock()
            text = await compose(current_turns(session.history, now))
            if text is None or not await deliver(text):
                return False
            session.turn += 1
            session.written_first = handle
            self._record(session, "", text)
            await memory.finish(now, short=Turn(user="", reply=text, at=now),
                                conversation=session.state(self.engine.config.recall_cooldown_turns))
        return True

    # ---- the user steers memory through buttons and commands ------------------------------------

    async def forget(self, scope: Scope, ids: Iterable[int] | None) -> int:
        """Forget (all when ``ids`` is None). The turns that told it leave the short-term context, the
        turns waiting to be queued and the spool files with it, as they follow every forget
        (``chat.followers``), so the next reply call (and a conversation summary) no longer carries it.
        Everything forgotten takes the whole context, and the turn being answered, with it."""
        return await self.engine.forget(scope, ids)

    async def begin_edit(self, scope: Scope, handle: int) -> None:
        """The user's next message becomes the new text of this memory, whichever process takes it."""
        await self.engine.await_edit(scope, handle)
        self.session(scope).steer.editing = handle

    async def reset(self, scope: Scope) -> str:
        """End the conversation: a summary worth keeping becomes a short-term memory; context is cleared."""
        session = self.session(scope)
        async with session.lock:
            saved = await self._summaries.summarise(scope, session)
            self._sessions.pop(scope, None)
            await self._end_conversation(scope, self.clock())
        return texts.reset_done(saved)

    async def _end_conversation(self, scope: Scope, now: datetime) -> None:
        """The short-term turns go, and the conversation's state with them: the next conversation, in any
        process, starts afresh (its cooldowns, countdown and first-turn reviews)."""
        await self.engine.clear_short_term(scope, ShortKind.TURN)
        await self.engine.write_turn(scope, now, conversation="")

    async def _reply(self, memory: MemoryTurn, session: Session, text: str, group: GroupTurn | None = None) -> Reply:
        scope, now = memory.scope, self.clock()
        session.turn += 1
        allow = rules.recall_allowed(list(session.injections), self.config.recall_max_rate, INJECTION_WINDOW)
        current = current_turns(session.history, now)
        try:
            context = await (group.context(memory, text, now) if group is not None else
                             memory.context(
                                 text, now, turn=session.turn, cooldown=session.cooldown, allow_recall=allow,
                                 earlier=[user for user, _ in current],
                                 reply=current[-1][1] if current else None,
                                 earlier_since=said_since(session.history, now),
                                 # A conversation's first reply (nothing said lately) may follow something up.
                                 follow_up=None if current else session.followups,
                             ))
        except StorageError as exc:
            # A locked or failing database must not silence the companion: answer without memory.
            log.warning("memory unavailable for %s, answering without it: %s", scope.key, exc)
            context = MemoryContext()
        for recalled in context.recalled:
            session.cooldown[recalled.memory.id] = session.turn
        if context.followup is not None:
            session.followups[context.followup.id] = session.followups.get(context.followup.id, 0) + 1
        answered = None
        if session.written_first is not None and group is None:  # the user answers what was written first
            answered, session.written_first = session.written_first, None
        session.injections.append(bool(context.recalled))
        toolset = self._toolset(scope, group)
        reference = render_reference(context, now, self.config.tz)
        if group is not None:
            reference = group.within(reference)
        messages = reply_messages(current, text, reference,
                                  with_tools=bool(toolset), note=group.note() if group is not None else None)
        answer: str | None
        tool_calls = 0
        key = session.answering
        told = SOURCE_TURN.set(key)  # a memory a tool saves knows this turn told it
        try:
            result = await run_tool_loop(self.llm, messages, toolset, purpose="reply",
                                         limits=self.config.tool_limits)
            answer, tool_calls = _bounded(result.text), len(result.outcomes)
        except LLMError as exc:
            log.warning("reply failed for %s: %s", scope.key, exc)
            answer = None
        finally:
            SOURCE_TURN.reset(told)
        keep = key is None or key not in session.dropped
        session.dropped.discard(key or "")
        if keep:
            self._record(session, text, answer, key)
        recalled_ids = tuple(r.memory.id for r in context.recalled)
        remember = group is None or bool(group.remember)
        turn = None
        if keep and remember:
            turn = Turn(user=text, reply=answer, at=now, chat_id=session.message[0], message_id=session.message[1],
                        key=key)
        # Counted before the write, which keeps the countdown with the turn; a group that keeps nothing
        # keeps no conversation state either.
        learn = answer is not None and remember
        extract = await self._learning.count_turn(memory, session, text) if learn else False
        state = session.state(self.engine.config.recall_cooldown_turns) if remember else None
        mentioned = await self._learning.finish_turn(memory, session, turn, context.recalled, answer, now,
                                                     conversation=state)
        if answered is not None:  # after the reply, which saw the memory: an event over and answered is done
            await self.engine.followups.answered(scope, answered, now)
        if answer is None:
            return Reply(texts.LLM_DOWN, ok=False, recalled=recalled_ids)
        if remember:
            self._learning.warm_reply(scope, answer)
        if learn:
            self._learning.after_turn(scope, now, extract)
        return Reply(answer, ok=True, recalled=recalled_ids, mentioned=tuple(mentioned), tool_calls=tool_calls)

    def _toolset(self, scope: Scope, group: GroupTurn | None) -> Toolset:
        """The tools of this turn, built per turn and closing over its scope, so no tool argument can
        name another user or chat. A group whose memory is off gets none (nothing stored, nothing read);
        any other group only the ``group_safe`` ones, whose results show no stored memory to the group."""
        if self._tools is None or (group is not None and not group.remember):
            return Toolset()
        tools = self._tools(scope)
        return Toolset(tools if group is None else (tool for tool in tools if tool.group_safe))

    def _record(self, session: Session, text: str, answer: str | None, key: str | None = None) -> None:
        """Add a turn to the short-term history, cutting the oldest in steps (``history_excess``)."""
        session.history.append(Told(text, answer, key, self.clock()))
        excess = history_excess(len(session.history), self.config.history_turns)
        for _ in range(excess):
            session.history.popleft()
        session.summarised_turn = max(0, session.summarised_turn - excess)

    async def drain(self) -> None:
        """Wait for background extractions and profile rebuilds (shutdown, tests, benchmarks); pending
        idle summaries are dropped (the turns are queued for extraction anyway)."""
        self._summaries.cancel_all()
        await self._learning.drain()


def _bounded(answer: str | None) -> str | None:
    if answer is None or len(answer) <= REPLY_MAX_CHARS:
        return answer
    return answer[: REPLY_MAX_CHARS - 1] + "…"
