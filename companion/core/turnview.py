"""What one reply needs of the store, read at once: the store's ``turn_context`` returns it, the engine's
``open_turn`` hands it on, and the chat layer reads its fields (companion mode, the group's switches, the
conversation's state). Data, so the chat layer can read it without reaching the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from companion.core.models import Memory, Profile, ShortItem


@dataclass(frozen=True, slots=True)
class TurnView:
    """What one reply needs, read at once (one consistent snapshot)."""

    change: int  # ``change_counter()`` as of this read: the caches compare it
    active: bool  # companion mode
    profile: tuple[Profile, bool] | None  # (profile, stale), None before the first build
    events: list[ShortItem]  # the newest events told, as many as asked for, oldest first
    turns: list[ShortItem]  # the newest short-term turns asked for, oldest first
    memories: list[Memory] | None  # the active memories, when asked for (an index to build); else None
    editing: int | None = None  # the memory whose new words the next message is (``set_editing``)
    # What the reply's host decides from settings, read with the rest rather than one call each:
    review_sent: datetime | None = None  # ``REVIEW_SENT`` of the scope
    group_memory: bool = True  # ``GROUP_MEMORY`` of the scope's group (a private scope: True)
    share_private: bool = False  # ``SHARE_PRIVATE`` of the scope's user, in a group scope
    # The conversation's own small state as its host last wrote it (``TurnRecord.conversation``), opaque
    # here: every worker process continues the conversation where the last one left it.
    conversation: str | None = None
    hinted_at: datetime | None = None  # when a "how to start" hint last went out to the scope (``set_hinted``)
    # How many forgets the scope has had: a conversation held in one process reads its turns again when
    # another process forgot something since (a memory, or everything, turns only included).
    forgot: int = 0
