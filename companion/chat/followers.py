"""How the chat layer's copies of what was said follow the engine's change feed (``MemoryEngine.follow``):
each conversation's session (its turns, the turns waiting to be queued, the turn being answered) and the
spool files. Registered once by ``ChatService``; a forget, whoever asks for it (a button, a command, a
tool, a review, the operator, another process), reaches them without naming them.

What each knows of a forget:

- This process's forget comes with the memories as they were and the keys of the turns they came from
  (``News.forgetting``): a session drops exactly the turns that told them (by key or by words,
  ``Session.forget``; all of them for a forget of everything), and every spool file the waiting turns
  that did (``Learning.scrub_spools``).
- Another process's forget comes as journal entries only (handles, no text): a session cannot tell which
  of its turns told the memory, so it drops its turns, to be read again from the store, which that forget
  scrubbed in its transaction, and its waiting turns, which no store holds (``Session.forget_unproven``);
  this process's spool file follows the session. The other spool files were scrubbed by the process that
  forgot (they share a directory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from companion.chat.group import Rooms
from companion.chat.learning import Learning
from companion.chat.session import Session, untold
from companion.core.models import Scope, Turn
from memory import Forgetting, News

log = logging.getLogger(__name__)


def untold_by(done: Forgetting) -> Callable[[Turn], bool]:
    """What a spool keeps of a scope's waiting turns after this forget (``session.untold``)."""
    if done.everything:
        return lambda turn: False
    return lambda turn: untold(turn, done.memories, done.turn_keys)


class SessionsFollow:
    """The sessions of one chat service, as followers of the change feed."""

    def __init__(self, sessions: Mapping[Scope, Session], ended: Callable[[Scope], None]) -> None:
        """``ended``: the conversation of the scope lost every turn (its pending idle summary goes)."""
        self._sessions = sessions
        self._ended = ended

    async def follow(self, news: News) -> None:
        if not news.forgot:
            return
        session = self._sessions.get(news.scope)
        if session is None:
            return
        done = news.forgetting
        if done is not None and done.everything:
            session.forget_everything()
        elif done is not None:
            session.forget(done.memories, done.turn_keys)
        if news.unexplained:
            dropped = session.forget_unproven()
            if dropped:
                log.warning("%d turn(s) of %s waiting to be queued are dropped: another process forgot something "
                            "they may tell", dropped, news.scope.key)
        if (done is not None and done.everything) or news.unexplained:
            self._ended(news.scope)


class SpoolsFollow:
    """The spool files, as a follower of the change feed; registered after ``SessionsFollow``, whose
    sessions this process's file mirrors."""

    def __init__(self, learning: Learning, sessions: Mapping[Scope, Session]) -> None:
        self._learning = learning
        self._sessions = sessions

    async def follow(self, news: News) -> None:
        if not news.forgot:
            return
        if news.forgetting is not None:
            await self._learning.scrub_spools(news.scope, untold_by(news.forgetting))
        await self._learning.forgotten(news.scope, self._sessions.get(news.scope), unexplained=news.unexplained)


class RoomsFollow:
    """The groups' rooms (other members' recent lines, in this process only, never stored) as a follower: what
    a member forgot of a group leaves that group's room, the lines that tell it; all of the member's lines when
    they forgot everything, or when another process forgot something this one cannot match in words."""

    def __init__(self, rooms: Rooms) -> None:
        self._rooms = rooms

    async def follow(self, news: News) -> None:
        if not news.forgot or news.scope.chat_id is None:
            return
        done = news.forgetting
        matched = done is not None and not done.everything and not news.unexplained
        self._rooms.forget(news.scope, done.memories if matched and done is not None else None)
