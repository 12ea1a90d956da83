"""Which process runs the scheduled jobs (decay, backups, reviews, weekly summaries): the one that leads.

One bot process always leads (``Alone``). A deployment of several workers hands the scheduler a
``Leader`` backed by something they share (a database advisory lock, a Redis lease): every worker keeps
its scheduler, and each job asks at its start whether this process may run it.
"""

from __future__ import annotations

from typing import Protocol


class Leader(Protocol):
    async def leads(self) -> bool:
        """Whether this process runs the scheduled jobs now (asked at each job's start)."""
        ...


class Alone:
    """The only process: it always leads."""

    async def leads(self) -> bool:
        return True


ALONE = Alone()
