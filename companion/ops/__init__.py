"""Operator work above the engine: scheduled jobs (run where the ``Leader`` says), backups, restore,
tables for the command line, the workers' shared queue and lead (Redis; ``workqueue``, ``redisleader``,
``workers``). May import ``memory`` and everything below it; never ``chat``, ``handlers``
or ``bot``."""
