"""AstrBot's string ids as the engine's integer scopes.

A scope is (platform id, group id or private, sender id): the sender's number is derived from the
platform and the sender id, the group's from the platform and the group id, so the same person has one
scope per group and one private scope, and two platforms never share one. ``unified_msg_origin`` names a
whole group and is never used. The numbers are a keyed hash, stable across restarts and machines, and
the plugin keeps each number's original id to show operators (``names``)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from companion.core.models import Scope

# Below the engine's id bound (2**53) and never zero.
_SPACE = 2**52 - 1


def _number(kind: str, platform: str, ident: str) -> int:
    digest = hashlib.blake2b(f"{kind}\x1f{platform}\x1f{ident}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _SPACE + 1


@dataclass(frozen=True, slots=True)
class Speaker:
    """Who speaks where, as AstrBot names them; ``group`` is empty in a private chat."""

    platform: str
    sender: str
    group: str = ""

    def __post_init__(self) -> None:
        if not self.platform or not self.sender:
            raise ValueError("a speaker needs a platform id and a sender id")

    @property
    def in_group(self) -> bool:
        return bool(self.group)

    @property
    def scope(self) -> Scope:
        user = _number("user", self.platform, self.sender)
        if not self.group:
            return Scope(user)
        return Scope(user, -_number("group", self.platform, self.group))

    @property
    def label(self) -> str:
        """How an operator reads this scope: ``platform:sender`` or ``platform:group/sender``."""
        return f"{self.platform}:{self.group}/{self.sender}" if self.group else f"{self.platform}:{self.sender}"

    def private(self) -> Speaker:
        return Speaker(self.platform, self.sender)

    def member(self, sender: str) -> Speaker:
        """Another sender in the same place (an admin command naming a user)."""
        return Speaker(self.platform, sender, self.group)
