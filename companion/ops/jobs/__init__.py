"""Scheduled work inside the bot process: daily maintenance and the nightly backup (``scheduled``), reviews
and weekly summaries (``proactive``), the background upgrade of old tables (``upgrade``) and which process
runs them (``leader``).

May import ``companion.ops.backup``, ``companion.ops.preflight``, ``memory`` and everything below but
``companion.storage`` (the engine's ``maintenance`` port instead); never ``admin`` or ``workers`` (same
layer), ``chat``, ``handlers`` or ``bot``."""
