"""The operators' command line over ``AdminService``: ``users``, ``forget``, ``export``, ``stats``.
Output is English plain text for a terminal; walks over every user show a tqdm progress bar on
stderr (hidden when stderr is not a terminal, so scripts and logs stay clean)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import tzinfo
from pathlib import Path

from tqdm import tqdm

from companion.core.models import MemoryType, Status, Tier
from companion.core.timeutil import show
from companion.core.usage import UsageCell
from companion.ops.admin.admin_service import HISTOGRAM, AdminService, Progress


@contextmanager
def progress_bar(label: str) -> Iterator[Progress]:
    """A ``Progress`` callback drawing a tqdm bar; the total is learned from the first report."""
    bar = tqdm(total=0, desc=label, unit="scope", file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        bar.close()


async def users(admin: AdminService, tz: tzinfo) -> str:
    with progress_bar("users") as progress:
        found = await admin.users(progress)
    if not found:
        return "no users"
    lines = [f"{'user':>14}  {'active':>6}  {'long':>4}  {'med':>4}  {'short':>5}  {'arch':>4}  {'forgot':>6}  "
             "last learned"]
    for u in found:
        last = show(u.last_learned, tz) if u.last_learned else "-"
        lines.append(f"{u.user_id:>14}  {u.active:>6}  {u.by_tier[Tier.LONG]:>4}  {u.by_tier[Tier.MEDIUM]:>4}  "
                     f"{u.by_tier[Tier.SHORT]:>5}  {u.archived:>4}  {u.forgotten:>6}  {last}")
    lines.append(f"{len(found)} users")
    return "\n".join(lines)


async def forget(admin: AdminService, user_id: int, handle: int | None) -> str:
    """One memory (owner-checked against ``user_id``) or, with ``handle=None``, all of the user's."""
    if handle is not None:
        count = await admin.delete(user_id, handle)
        return f"forgot memory {handle} of user {user_id}" if count else f"memory {handle} was already gone"
    with progress_bar("forget") as progress:
        count = await admin.forget_all(user_id, progress)
    return f"forgot {count} memories of user {user_id}"


async def export(admin: AdminService, path: Path, user_id: int | None, keyword: str | None) -> str:
    with progress_bar("export") as progress:
        data, count = await admin.export(user_id, keyword, progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"exported {count} memories to {path}"


def usage_table(cells: list[UsageCell]) -> list[str]:
    if not cells:
        return ["no LLM calls recorded in the last 7 days"]
    lines = [f"{'day':<10}  {'purpose':<14}  {'calls':>5}  {'fail':>4}  {'prompt':>8}  {'cached':>8}  "
             f"{'uncached':>8}  {'output':>7}  {'avg ms':>7}"]
    for c in cells:
        lines.append(f"{c.day:<10}  {c.purpose:<14}  {c.calls:>5}  {c.failures:>4}  {c.prompt_tokens:>8}  "
                     f"{c.cache_hit_tokens:>8}  {c.prompt_tokens - c.cache_hit_tokens:>8}  "
                     f"{c.completion_tokens:>7}  {c.avg_latency_ms:>7.0f}")
    return lines


async def stats(admin: AdminService) -> str:
    with progress_bar("stats") as progress:
        s = await admin.stats(progress)
    histogram = ", ".join(f"{lo}-{min(hi, 100)}: {n}" for (lo, hi), n in zip(HISTOGRAM, s.importance, strict=True))
    return "\n".join([
        f"users: {s.users} ({s.scopes} scopes)",
        "active by tier: " + ", ".join(f"{t.value} {s.by_tier[t]}" for t in Tier),
        "active by type: " + ", ".join(f"{t.value} {s.by_type[t]}" for t in MemoryType),
        "by status: " + ", ".join(f"{st.value} {s.by_status[st]}" for st in Status),
        f"importance: {histogram}",
        f"extracted memories: {s.extracted}; recalls/views: {s.recalls}; mentions: {s.mentions}",
        "LLM calls, last 7 days:",
        *usage_table(s.usage),
    ])
