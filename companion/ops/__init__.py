"""Operator work above the engine, split by concern into subpackages, with the composition helpers on top.

Subpackages: ``backup`` (backups, restore, migration between stores, the CSV form, the one-writer lock),
``admin`` (what operators do to any user's memories: the service, its Telegram texts, the command line,
charts, tables, exports), ``jobs`` (scheduled maintenance, reviews and weekly summaries, background table
upgrades, the lead), ``workers`` (several processes on one Redis: the update queue, the Redis lead, the
worker processes). On top, where a newcomer looks first: ``engine_assembly`` (the engine assembled from
settings), ``operator_commands`` (the command table of ``python bot.py``) and ``preflight`` (start-up checks,
below the subpackages: ``workers`` raises its ``StartupError``).

The modules here may import the subpackages, ``memory`` and everything below it; nothing in ``companion.ops``
imports ``chat``, ``kanban``, ``console``, ``handlers`` or ``bot``, and nothing but ``engine_assembly`` (which
builds the store aside, as ``bot.py`` does) imports ``companion.storage``: the rest reaches memory through the
engine and its operator ports (``engine.admin_port``, ``engine.maintenance``)."""
