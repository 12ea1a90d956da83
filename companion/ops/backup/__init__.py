"""The database's copies: nightly backups (``nightly``) and the backup that stops when told (``stoppable``),
restore from a backup (``restore``, ``staging``), restoring into a server database (``migrate``; the copy
itself is ``engine.migration``), the CSV form of memories they share (``csvformat``) and the lock that lets
one process at a time write the database (``dblock``).

May import ``memory`` and everything below it but ``companion.storage`` (in practice ``core`` and the engine's
``maintenance`` and ``snapshots``); nothing else of ``companion.ops``, never ``chat``, ``handlers`` or ``bot``."""
