"""Follow-ups written first on PostgreSQL with two worker processes over Redis behind the webhook: the round
runs where the leader runs, the message goes once across a restart, and the worker that takes the answer
reads it with what was asked (the proof of ``test_e2e_followups``, in a file of its own so the two run side by
side)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes import FakeLLM, FakeTelegram
from tests.test_e2e_followups import the_morning_after_the_trip


@pytest.mark.postgresql
async def test_on_postgresql_with_two_workers_the_leader_writes_first_once(
        timed_servers: tuple[FakeTelegram, FakeLLM], tmp_path: Path) -> None:
    await the_morning_after_the_trip(timed_servers, tmp_path, "postgresql")
