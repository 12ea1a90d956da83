"""What ``search_memories`` may return: metadata filters (type, tier, origin, creation time) and the word
match of a query. Pure data and predicates; the engine applies them (``MemoryEngine.search``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from companion.core.models import Memory, MemoryType, Origin, Tier


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """An empty set admits every value; ``since`` is inclusive, ``until`` exclusive (both aware UTC)."""

    types: frozenset[MemoryType] = field(default_factory=frozenset)
    tiers: frozenset[Tier] = field(default_factory=frozenset)
    origins: frozenset[Origin] = field(default_factory=frozenset)
    since: datetime | None = None
    until: datetime | None = None

    @classmethod
    def of(
        cls, *, types: Iterable[str] = (), tiers: Iterable[str] = (), origins: Iterable[str] = (),
        since: datetime | None = None, until: datetime | None = None,
    ) -> MemoryFilter:
        """From plain strings (a tool call's arguments, a command's options); an unknown value raises
        ValueError naming it."""
        return cls(
            types=frozenset(MemoryType(t) for t in types), tiers=frozenset(Tier(t) for t in tiers),
            origins=frozenset(Origin.parse(o) for o in origins), since=since, until=until,
        )

    def admits(self, memory: Memory) -> bool:
        return (
            (not self.types or memory.type in self.types)
            and (not self.tiers or memory.tier in self.tiers)
            and (not self.origins or memory.origin in self.origins)
            and (self.since is None or memory.created_at >= self.since)
            and (self.until is None or memory.created_at < self.until)
        )

    @property
    def is_empty(self) -> bool:
        return not (self.types or self.tiers or self.origins or self.since or self.until)


def matches_words(memory: Memory, words: Sequence[str]) -> bool:
    """Every (lower-case) query word is in the event text, or contains or is contained by a keyword."""
    event = memory.event.lower()
    return all(w in event or any(w in k or k in w for k in memory.keywords) for w in words)
