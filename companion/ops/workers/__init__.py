"""Several processes of one bot on one Redis (``REDIS_URL``): the update queue in shards (``workqueue``), the
lead of the scheduled jobs as a Redis lease (``redisleader``) and the worker processes with what they share
(``processes``).

May import ``companion.ops.preflight`` (its ``StartupError``), ``companion.ops.backup``, ``memory`` and
everything below; never ``admin`` or ``jobs`` (same layer), ``chat``, ``handlers`` or ``bot``."""
