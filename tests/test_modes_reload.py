"""A worker that takes a shard over reads companion mode again for the shard's chats only: another worker
switched them meanwhile (``CompanionModes.reload``); a scope this process is switching keeps its own value."""

from __future__ import annotations

from datetime import UTC, datetime

from companion.chat.modes import CompanionModes
from companion.core.models import Scope
from tests.support import Rig

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TAKEN, OTHER, SWITCHING = Scope(101), Scope(102, -5001), Scope(103)


async def test_reload_reads_the_taken_scopes_only(rig: Rig) -> None:
    modes = CompanionModes(rig.engine)
    await rig.engine.set_active(OTHER, True, NOW)
    await modes.load()
    assert modes.is_on(OTHER) and not modes.is_on(TAKEN)

    # Meanwhile, in another worker: TAKEN started, OTHER stopped, SWITCHING started.
    for scope, on in ((TAKEN, True), (OTHER, False), (SWITCHING, True)):
        await rig.engine.set_active(scope, on, NOW)
    async with modes.switching(SWITCHING):
        await modes.reload(lambda scope: scope in (TAKEN, SWITCHING))
        assert not modes.is_on(SWITCHING), "a scope being switched here keeps what this process set"
    assert modes.is_on(TAKEN)
    assert modes.is_on(OTHER), "a scope of a shard not taken is left as it was"
