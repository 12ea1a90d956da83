"""Operator work above the engine: scheduled jobs (run where the ``Leader`` says), backups, restore,
tables for the command line. May import ``memory`` and everything below it; never ``chat``, ``handlers``
or ``bot``."""
