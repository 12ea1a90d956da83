"""The Dida365 (TickTick) kanban of the memory tiers, an optional per-user link (docs/dida365.md).

``client`` (the Open API over aiohttp, typed errors), ``cards`` (a memory as a card and back: pure),
``records`` (the link and card records the store keeps, the token's encryption), ``oauth`` (one-time states,
the callback server), ``sync`` (push from the change journal, pull through the engine's own calls),
``worker`` (the background loop per user), ``texts`` (what the user reads). Imports ``core``, ``config``,
``storage.base`` and the engine API (``memory``); never aiogram: the Telegram commands are ``handlers/dida.py``.
"""
