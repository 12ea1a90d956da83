"""The database's copies: nightly backups (``nightly``) and the backup that stops when told (``stoppable``),
restore from a backup (``restore``, ``staging``), copying one store into another (``migrate``), the CSV form
of memories they share (``csvformat``) and the lock that lets one process at a time write the database
(``dblock``).

May import ``memory`` and everything below it (in practice ``core`` and the storage seam); nothing else of
``companion.ops``, never ``chat``, ``handlers`` or ``bot``."""
