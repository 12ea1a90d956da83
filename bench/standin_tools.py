"""Stand-in memory tools for ``python -m bench cost --tools``: the eight tools of issue 8 with their
signatures and limits, built with the real ``Tool.function`` machinery, but with canned bodies. They
measure what offering tools costs (definitions in every prompt, extra round trips), not what the real
memory tools do; the real ones replace them once written."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from companion.core.models import Scope
from companion.llm.tools import Tool

Content = Annotated[str, Field(min_length=1, max_length=200)]
Handle = Annotated[str, Field(min_length=1, max_length=16, pattern=r"^[a-z0-9]+$")]
Importance = Annotated[int, Field(ge=0, le=100)]
Tier = Literal["core", "active", "archive"]
Kind = Literal["fact", "event", "preference", "relationship"]
Limit = Annotated[int, Field(ge=1, le=20)]
SEARCH_WORDS = ("记得", "还记")
SAVE_WORDS = ("记住", "别忘了")


def standin_tools(scope: Scope) -> list[Tool]:
    found: list[dict[str, Any]] = [{"handle": f"m{scope.user_id}a", "content": "对花生过敏", "tier": "core"}]

    async def save_memory(content: Content, type: Kind = "fact", tier: Tier = "active",
                          importance: Importance = 60) -> dict[str, Any]:
        """Save one thing about the user worth remembering for weeks. Use when the user asks you to
        remember something, or tells you something important about their health, life or preferences.

        Args:
            content: the memory, one short sentence in the user's language, with a date if it is an event.
            type: what kind of memory it is.
            tier: core for lasting facts, active for current matters, archive for old ones.
            importance: 0-100; health and safety 80 or more, passing moods under 30.
        """
        return {"saved": True, "handle": f"m{scope.user_id}n"}

    async def search_memories(query: Annotated[str, Field(min_length=1, max_length=100)],
                              tiers: list[Tier] | None = None, types: list[Kind] | None = None,
                              since: Annotated[str | None, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")] = None,
                              limit: Limit = 5) -> list[dict[str, Any]]:
        """Search what you remember about the user, most relevant first.

        Args:
            query: words to look for.
            tiers: only these tiers.
            types: only these kinds of memory.
            since: only memories from this day on (YYYY-MM-DD).
            limit: at most this many results.
        """
        return found[:limit]

    async def update_memory(handle: Handle, content: Content | None = None,
                            importance: Importance | None = None) -> dict[str, Any]:
        """Correct or re-rate one memory, by the handle a search or list showed.

        Args:
            handle: the memory's handle.
            content: the corrected sentence.
            importance: the new importance, 0-100.
        """
        return {"updated": handle}

    async def forget_memory(handle: Handle | None = None,
                            description: Annotated[str | None, Field(max_length=100)] = None) -> dict[str, Any]:
        """Forget a memory the user asked you to forget: by handle, or by a description of it.

        Args:
            handle: the memory's handle, when known.
            description: what the memory is about, when the handle is not known.
        """
        return {"forgotten": handle or description}

    async def list_memories(tier: Tier | None = None) -> list[dict[str, Any]]:
        """List what you remember about the user, newest first.

        Args:
            tier: only this tier.
        """
        return found

    async def move_memory(handle: Handle, tier: Tier) -> dict[str, Any]:
        """Move a memory to another tier.

        Args:
            handle: the memory's handle.
            tier: where it goes.
        """
        return {"moved": handle, "tier": tier}

    async def archive_memory(handle: Handle) -> dict[str, Any]:
        """Archive a memory that no longer matters day to day; it stays searchable.

        Args:
            handle: the memory's handle.
        """
        return {"archived": handle}

    async def get_due_memories(days_overdue: Annotated[int, Field(ge=0, le=365)] = 0) -> list[dict[str, Any]]:
        """Memories due for review, each with a suggestion (keep, update, archive or forget).

        Args:
            days_overdue: only memories at least this many days past their review date.
        """
        return []

    return [Tool.function(fn) for fn in (save_memory, search_memories, update_memory, forget_memory,
                                         list_memories, move_memory, archive_memory, get_due_memories)]


def wants_tool(user_text: str) -> tuple[str, dict[str, Any]] | None:
    """The call a companion model would make for this user turn, if any (the scripted model's rule)."""
    if any(word in user_text for word in SAVE_WORDS):
        return "save_memory", {"content": user_text[:200], "importance": 70}
    if any(word in user_text for word in SEARCH_WORDS):
        return "search_memories", {"query": user_text[:100]}
    return None
