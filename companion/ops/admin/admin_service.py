"""What operators do to any user's memories, shared by the Telegram admin commands (``handlers/admin``)
and the command line (``python bot.py users | forget | export | stats``).

Changes go through the engine's API (owner-checked handles, the same save, edit and forget as the
user's own), so an admin edit updates the recall index and profile like any other. Reading every user
(stats, export) walks the scopes through the admin port (``engine.admin_port``) one by one, each read its
own short transaction, reporting progress.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo

from companion.core import dates
from companion.core.csvexport import export_csv_bytes
from companion.core.errors import MemoryNotFoundError, NotYourMemoryError
from companion.core.models import Memory, MemoryDraft, MemoryType, Origin, Scope, Status, Tier, Validity
from companion.core.spools import TurnSpools
from companion.core.timeutil import utcnow
from companion.core.usage import UsageCell
from companion.engine.admin_port import AdminPort
from companion.ops.admin.chart import usage_png
from memory import MemoryEngine

Progress = Callable[[int, int], None]
Forget = Callable[[Scope, Iterable[int] | None], Awaitable[int]]
REPORT_DAYS = 7
HISTOGRAM = ((0, 20), (20, 40), (40, 60), (60, 80), (80, 101))
DEFAULT_IMPORTANCE = 60.0


@dataclass(frozen=True, slots=True)
class UserSummary:
    user_id: int
    scopes: list[str]
    by_tier: dict[Tier, int]
    by_type: dict[MemoryType, int]
    archived: int
    forgotten: int
    last_learned: datetime | None

    @property
    def active(self) -> int:
        return sum(self.by_tier.values())


@dataclass(slots=True)
class AdminStats:
    users: int = 0
    scopes: int = 0
    by_tier: Counter[Tier] = field(default_factory=Counter)
    by_type: Counter[MemoryType] = field(default_factory=Counter)
    by_status: Counter[Status] = field(default_factory=Counter)
    importance: list[int] = field(default_factory=lambda: [0] * len(HISTOGRAM))
    extracted: int = 0  # active memories the model extracted from conversations
    recalls: int = 0  # times active memories were recalled or shown (access count)
    mentions: int = 0  # times a reply mentioned a recalled memory
    usage: list[UsageCell] = field(default_factory=list)
    followups: dict[str, int] = field(default_factory=dict)  # written first: sent, answered, stopped


class AdminService:
    def __init__(self, engine: MemoryEngine, reads: AdminPort, tz: tzinfo, *,
                 forget: Forget | None = None, clock: Callable[[], datetime] = utcnow,
                 spools: TurnSpools | None = None) -> None:
        self.engine = engine
        self.reads = reads
        self.tz = tz
        self.clock = clock
        self._forget = forget
        self._spools = spools

    # ---- reading ---------------------------------------------------------------------------------

    async def _walk(self, scopes: list[Scope], progress: Progress | None) -> list[tuple[Scope, list[Memory]]]:
        out: list[tuple[Scope, list[Memory]]] = []
        for done, scope in enumerate(scopes, start=1):  # streamed: a big scope is read in short reads
            out.append((scope, [m async for _, batch in self.reads.stream_memories([scope]) for m in batch]))
            if progress is not None:
                progress(done, len(scopes))
        return out

    async def user_scopes(self, user_id: int) -> list[Scope]:
        return [s for s in await self.reads.scopes() if s.user_id == user_id]

    async def users(self, progress: Progress | None = None) -> list[UserSummary]:
        walked = await self._walk(await self.reads.scopes(), progress)
        ids = sorted({scope.user_id for scope, _ in walked})
        return [_summary(uid, [(s, ms) for s, ms in walked if s.user_id == uid]) for uid in ids]

    async def user(self, user_id: int) -> UserSummary:
        return _summary(user_id, await self._walk(await self.user_scopes(user_id), None))

    async def export(self, user_id: int | None = None, keyword: str | None = None,
                     progress: Progress | None = None) -> tuple[bytes, int]:
        """CSV bytes of every non-forgotten memory (of one user, containing a keyword when given)."""
        scopes = await (self.user_scopes(user_id) if user_id is not None else self.reads.scopes())
        word = (keyword or "").lower()
        rows = [(scope, m) for scope, memories in await self._walk(scopes, progress) for m in memories
                if m.status is not Status.FORGOTTEN
                and (not word or word in m.event.lower() or any(word in k.lower() for k in m.keywords))]
        return export_csv_bytes(rows, self.tz)

    async def stats(self, progress: Progress | None = None) -> AdminStats:
        now = self.clock()
        stats = AdminStats()
        walked = await self._walk(await self.reads.scopes(), progress)
        stats.scopes = len(walked)
        stats.users = len({scope.user_id for scope, _ in walked})
        for _, memories in walked:
            for m in memories:
                stats.by_status[m.status] += 1
                if not m.is_active:
                    continue
                stats.by_tier[m.tier] += 1
                stats.by_type[m.type] += 1
                stats.importance[next(i for i, (lo, hi) in enumerate(HISTOGRAM) if lo <= m.importance < hi)] += 1
                stats.extracted += m.origin is Origin.EXTRACTED
                stats.recalls += m.access_count
                stats.mentions += m.mention_count
        stats.usage = await self.usage_report(now)
        stats.followups = await self.engine.followups.counts()
        return stats

    async def usage_report(self, now: datetime | None = None) -> list[UsageCell]:
        """LLM calls of the last seven local days (today included), by day and purpose."""
        now = now or self.clock()
        local = now.astimezone(self.tz)
        start = local.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=REPORT_DAYS - 1)
        return await self.reads.usage_report(start, local.utcoffset() or timedelta(0))

    # ---- changes ---------------------------------------------------------------------------------

    async def add(self, user_id: int, content: str, importance: float | None = None,
                  validity: Validity = Validity.DAYS_30) -> Memory:
        """A memory an operator adds to a user's own (private) scope; its tier follows the validity, and a day
        its words name (relative ones read in the bot's timezone today) is its date."""
        now = self.clock()
        dated = dates.resolve(content, now.astimezone(self.tz).date())
        draft = MemoryDraft(event=dated.text, keywords=[], importance=DEFAULT_IMPORTANCE if importance is None
                            else importance, validity=validity, type=MemoryType.FACT, origin=Origin.ADMIN,
                            source_at=now, happens=dated.when)
        return await self.engine.save_draft(Scope(user_id), draft, now)

    async def owner(self, user_id: int, handle: int) -> Scope:
        """The scope of ``user_id`` that holds ``handle`` (private or a group); raises NotYourMemoryError
        when the handle is another user's, MemoryNotFoundError when there is no such memory."""
        owner = await self.reads.owner_of(handle)
        if owner is None:
            raise MemoryNotFoundError(f"no memory {handle}")
        if owner.user_id != user_id:
            raise NotYourMemoryError(f"memory {handle} belongs to another user")
        await self.engine.get(owner, handle)  # exists and not a tombstone row of another table
        return owner

    async def delete(self, user_id: int, handle: int) -> int:
        scope = await self.owner(user_id, handle)
        return await self._drop(scope, [handle])

    async def forget_all(self, user_id: int, progress: Progress | None = None) -> int:
        scopes = await self.user_scopes(user_id)
        gone = 0
        for done, scope in enumerate(scopes, start=1):
            gone += await self._drop(scope, None)
            if progress is not None:
                progress(done, len(scopes))
        if self._spools is not None:  # what they said while the database was out, waiting on disk
            await self._spools.drop_user(user_id)
        return gone

    async def edit(self, user_id: int, handle: int, content: str, importance: float | None = None) -> Memory:
        scope = await self.owner(user_id, handle)
        return await self.engine.edit(scope, handle, content, self.clock(), importance=importance)

    async def _drop(self, scope: Scope, handles: Iterable[int] | None) -> int:
        if self._forget is not None:  # the chat service's: the in-process context forgets too
            return await self._forget(scope, handles)
        return await self.engine.forget(scope, handles)


def _summary(user_id: int, walked: list[tuple[Scope, list[Memory]]]) -> UserSummary:
    memories = [m for _, ms in walked for m in ms]
    active = [m for m in memories if m.is_active]
    return UserSummary(
        user_id=user_id, scopes=[s.key for s, _ in walked],
        by_tier={t: sum(m.tier is t for m in active) for t in Tier},
        by_type={t: sum(m.type is t for m in active) for t in MemoryType},
        archived=sum(m.status is Status.ARCHIVED for m in memories),
        forgotten=sum(m.status is Status.FORGOTTEN for m in memories),
        last_learned=max((m.created_at for m in active), default=None),
    )


def usage_chart(cells: list[UsageCell]) -> bytes:
    """Stacked bars per day: cached prompt tokens, uncached prompt tokens, completion tokens. Raises
    ChartUnavailableError without the optional plotting library."""
    days = sorted({c.day for c in cells})
    columns = [(sum(c.cache_hit_tokens for c in cells if c.day == d),
                sum(c.prompt_tokens - c.cache_hit_tokens for c in cells if c.day == d),
                sum(c.completion_tokens for c in cells if c.day == d)) for d in days]
    return usage_png(days, columns)
