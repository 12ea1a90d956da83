""""How to start" hints to people outside companion mode, one per ``HINT_EVERY`` per scope whichever
worker process takes their messages: this process's gate (``core.hints.HintGate``) answers a burst without
the store, and what passes it is checked against the last hint any process sent (``TurnView.hinted_at``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from companion.core.errors import StorageError
from companion.core.hints import HintGate
from companion.core.models import Scope
from memory import MemoryEngine

log = logging.getLogger(__name__)


class Hints:
    def __init__(self, engine: MemoryEngine, clock: Callable[[], datetime], gate: HintGate | None = None) -> None:
        self._engine, self._clock = engine, clock
        self.gate = gate or HintGate()

    async def allow(self, scope: Scope) -> bool:
        """Whether a hint may go to ``scope`` now; if so it counts as sent (here and in the store)."""
        now = self._clock()
        if not self.gate.allow(scope, now):
            return False
        try:
            last = await self._engine.hinted_at(scope)
            if not self.gate.due(last, now):
                self.gate.note(scope, last or now)
                return False
            await self._engine.hinted(scope, now)
        except StorageError as exc:  # a hint more or less is no harm: this process's gate decides
            log.warning("the last hint to %s is unknown: %s", scope.key, exc)
        return True
