"""The USER_PROMPT: a short two-layer profile (core always shown, dynamic on matching turns).

Built by the model from the scope's memories (in the extraction's call when one runs while it is due),
persisted so it survives restarts and LLM outages, and cached in process; the cache follows the change
feed (a forget drops it). A failed rebuild keeps the last good profile. The model is asked without the
scope's lock; under it the profile is kept only if every memory it was built from is still there in
those words.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from functools import cache

import prompts
from companion.core import tiers
from companion.core.errors import LLMBadResponseError
from companion.core.extraction import clean_keywords
from companion.core.models import DynamicTrait, Memory, MemoryType, Profile, Scope, Tier, Validity
from companion.core.text import normalize_text
from companion.core.timeutil import local_date
from companion.engine.following import News
from companion.llm.jsonmodel import JsonModel
from companion.storage.base import MemoryStore

log = logging.getLogger(__name__)

MAX_PROFILE_CHARS = 200
PROFILE_INPUT = 40  # memories shown to one profile build


@dataclass(frozen=True, slots=True)
class ProfilePolicy:
    ttl: timedelta = timedelta(hours=24)
    min_refresh: timedelta = timedelta(hours=6)
    min_importance: float = 30.0
    max_chars: int = MAX_PROFILE_CHARS


def needs_rebuild(
    built_at: datetime | None, stale: bool, now: datetime, policy: ProfilePolicy, empty: bool = False,
    overflowing: bool = False,
) -> bool:
    """Rebuild when there is none, when it is older than the TTL, or when memories changed and the last
    build is old enough: retelling one detail must not cost a model call every turn. An empty profile
    is rebuilt as soon as anything is learned (the first facts must not wait hours behind a blank one), and
    so is one whose unprofiled facts no longer fit beside it (``overflowing``: every reply shows those facts
    until a profile carries them, and that view must stay within its budget)."""
    if built_at is None:
        return True
    age = now - built_at
    return age >= policy.ttl or (stale and (empty or overflowing or age >= policy.min_refresh))


def parse_profile(data: dict[str, object], max_chars: int = MAX_PROFILE_CHARS, *, guard: bool = True) -> Profile:
    """The model's profile, validated. With ``guard``, text copied from the prompt's format example is
    dropped: a model given few memories may answer with the example, which says nothing about the user."""
    core = data.get("core")
    if not isinstance(core, str):
        raise LLMBadResponseError("profile JSON has no 'core' text")
    example = _example() if guard else Profile(core="")
    core = normalize_text(core)[:max_chars]
    if example.core and example.core in core:
        core = ""
    copied = {t.text for t in example.dynamic}
    budget = max_chars - len(core)
    traits: list[DynamicTrait] = []
    raw = data.get("dynamic")
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            continue
        text = normalize_text(item["text"])
        keywords = tuple(clean_keywords(item.get("keywords")))
        if text and keywords and len(text) <= budget and text not in copied:
            traits.append(DynamicTrait(text, keywords))
            budget -= len(text)
    return Profile(core=core, dynamic=traits)


@cache
def _example() -> Profile:
    """The format example the profile prompt shows, parsed as an answer would be."""
    text = prompts.render("profile", today="", max_chars=MAX_PROFILE_CHARS, memories="")
    line = next((ln for ln in text.splitlines() if ln.startswith('{"core"')), "")
    return parse_profile(json.loads(line), guard=False) if line else Profile(core="")


def matching_traits(profile: Profile, keywords: Iterable[str]) -> list[str]:
    words = set(keywords)
    return [
        t.text for t in profile.dynamic
        if any(k in words or any(k in w or w in k for w in words if len(w) >= 2) for k in t.keywords)
    ]


def profile_input(memories: Iterable[Memory], now: datetime, min_importance: float) -> list[Memory]:
    """What the profile is built from: what matters across every tier, at most ``PROFILE_INPUT`` lines so
    the call stays small for a user with hundreds of memories. First the instructions, then the
    always-loaded set (every long-term memory, the top medium-term and the newest short-term ones) together
    with every permanent memory whatever its tier (a permanent fact learned yesterday may still be short-
    term), then the rest; each part by priority, a permanent memory weighed as a long-term one."""
    usable = [m for m in memories if m.is_active and not m.is_expired(now) and m.importance >= min_importance]
    loaded = {m.id for m in tiers.always_loaded(usable)}
    facts = [m for m in usable if m.type is not MemoryType.INSTRUCTION]
    first = [m for m in facts if m.id in loaded or m.validity is Validity.PERMANENT]
    rest = [m for m in facts if m.id not in loaded and m.validity is not Validity.PERMANENT]
    return [*tiers.instructions(usable), *_by_weight(first), *_by_weight(rest)][:PROFILE_INPUT]


def _by_weight(memories: Iterable[Memory]) -> list[Memory]:
    def weight(m: Memory) -> int:
        return tiers.priority(m.importance, Tier.LONG if m.validity is Validity.PERMANENT else m.tier)

    return sorted(memories, key=lambda m: (-weight(m), -m.importance, -m.id))


def memory_lines(memories: Sequence[Memory], tz: tzinfo) -> str:
    """One line a memory, in the given order (the profile input's, most telling first)."""
    return "\n".join(f"- {m.event}（重要程度 {m.importance:.0f}，{m.type.value}）" for m in memories)


@dataclass(frozen=True, slots=True)
class ProfileAsk:
    """A rebuild asked in the extraction's call: the memories it is built from and the prompt's part."""

    memories: tuple[Memory, ...]
    prompt: str


class ProfileService:
    def __init__(self, storage: MemoryStore, llm: JsonModel | None, tz: tzinfo, policy: ProfilePolicy) -> None:
        self._storage = storage
        self._llm = llm
        self._tz = tz
        self.policy = policy
        self._overflowing: set[Scope] = set()
        # None: read with a turn's context, there is none yet (that turn need not ask again).
        self._cache: dict[Scope, tuple[Profile, bool] | None] = {}

    def invalidate(self, scope: Scope) -> None:
        self._cache.pop(scope, None)

    async def follow(self, news: News) -> None:
        """A follower of the change feed (``following``): a forget, here or in another process, drops the
        cached profile, which may quote what was forgotten (the forget deleted the stored one: the next
        read finds none until a rebuild)."""
        if news.forgot:
            self.invalidate(news.scope)

    def overflow(self, scope: Scope) -> None:
        """The facts learned since the scope's profile was built no longer fit beside it: rebuild it at the
        next chance (the next extraction's own call), whatever its age."""
        self._overflowing.add(scope)

    def prime(self, scope: Scope, stored: tuple[Profile, bool] | None) -> None:
        """The stored profile, read with a turn's context (another process may have rebuilt it). The
        same build cached here keeps what this process knows: memories learned after it was built."""
        cached = self._cache.get(scope)
        if stored is None:
            self._cache[scope] = None
        elif cached is None or cached[0].built_at != stored[0].built_at:
            self._cache[scope] = stored
        else:
            self._cache[scope] = (cached[0], cached[1] or stored[1])

    async def current(self, scope: Scope) -> tuple[Profile, bool] | None:
        """The cached or persisted profile and whether it is stale; None before the first build."""
        if scope not in self._cache:
            loaded = await self._storage.load_profile(scope)
            if loaded is None:
                return None
            self._cache[scope] = loaded
        return self._cache[scope]

    async def due(self, scope: Scope, now: datetime) -> bool:
        current = await self.current(scope)
        if current is None:
            return True
        profile, stale = current
        empty = not profile.core and not profile.dynamic
        return needs_rebuild(profile.built_at, stale, now, self.policy, empty=empty,
                             overflowing=scope in self._overflowing)

    async def ask_with_extraction(self, scope: Scope, now: datetime) -> ProfileAsk | None:
        """A rebuild to ask for in the extraction's own call: when one is due, or will be as soon as the
        extraction learns anything (the empty profile, or one past the minimum refresh). It costs no call
        of its own, and it is built with what the turns tell rather than made stale by them at once."""
        if self._llm is None:
            return None
        current = await self.current(scope)
        if current is not None:
            profile = current[0]
            empty = not profile.core and not profile.dynamic
            if not needs_rebuild(profile.built_at, True, now, self.policy, empty=empty,
                                 overflowing=scope in self._overflowing):
                return None
        memories = profile_input(await self._storage.fetch_memories(scope), now, self.policy.min_importance)
        prompt = prompts.render("extract_profile", max_chars=self.policy.max_chars,
                                memories=memory_lines(memories, self._tz) or "（无）")
        return ProfileAsk(tuple(memories), prompt)

    async def adopt(
        self, scope: Scope, ask: ProfileAsk, answer: object, now: datetime, *, rewritten: Collection[int],
        learned: bool, whole: bool,
    ) -> bool:
        """Keep the profile the extraction's call wrote (``answer``: its "profile" object), under the scope's
        lock right after the extraction was stored. ``rewritten``: the memories the extraction merged into
        (their new words are the model's own); ``learned``: it stored anything; ``whole``: every draft was
        stored and nothing else changed meanwhile. Kept only when it is due and is built from what is stored
        now, as ``rebuild`` keeps one; otherwise (or when the answer has no valid profile) False, and a
        rebuild of its own follows when one is due."""
        if not whole or not isinstance(answer, dict) or not (learned or await self.due(scope, now)):
            return False
        try:
            profile = parse_profile(answer, self.policy.max_chars)
        except LLMBadResponseError:
            return False
        told = {(m.id, m.event) for m in await self._storage.fetch_memories(scope)}
        if any(m.id not in rewritten and (m.id, m.event) not in told for m in ask.memories):
            return False
        profile.built_at = now
        await self._storage.save_profile(scope, profile, now)
        self._cache[scope] = (profile, False)
        self._overflowing.discard(scope)
        return True

    async def rebuild(
        self, scope: Scope, now: datetime, lock: Callable[[Scope], AbstractAsyncContextManager[None]]
    ) -> Profile:
        """Ask the model for a fresh profile and persist it. Raises LLMError; the old one stays, as it
        does when something the new one was built from was forgotten or changed while the model wrote."""
        memories = profile_input(await self._storage.fetch_memories(scope), now, self.policy.min_importance)
        profile = Profile(core="", dynamic=[], built_at=now) if not memories else await self._ask(memories, now)
        async with lock(scope):
            active = await self._storage.fetch_memories(scope)
            now_told = {(m.id, m.event) for m in active}
            if any((m.id, m.event) not in now_told for m in memories):
                log.info("profile of %s overtaken by a change to its memories; the last one stays", scope.key)
                current = await self.current(scope)
                return current[0] if current else Profile(core="")
            await self._storage.save_profile(scope, profile, now)
            # Memories learned meanwhile are not in it: it stays due for the next rebuild.
            grown = {m.id for m in profile_input(active, now, self.policy.min_importance)} != {m.id for m in memories}
            self._cache[scope] = (profile, grown)
            self._overflowing.discard(scope)
        return profile

    async def _ask(self, memories: Sequence[Memory], now: datetime) -> Profile:
        if self._llm is None:
            raise LLMBadResponseError("no model configured for profiles")
        prompt = prompts.render(
            "profile", today=local_date(now, self._tz), max_chars=self.policy.max_chars,
            memories=memory_lines(memories, self._tz),
        )
        data = await self._llm.json([{"role": "user", "content": prompt}], purpose="profile")
        profile = parse_profile(data, self.policy.max_chars)
        profile.built_at = now
        return profile
