"""What operators do to any user's memories: the service shared by the Telegram admin commands and the
command line (``admin_service``), the admin commands' texts (``admin_texts``), the command line's output
(``admin_cli``, ``table``), the usage chart (``chart``) and CSV exports (``export``).

May import ``companion.ops.backup`` (the CSV form), ``companion.ops.preflight``, ``memory`` and everything
below but ``companion.storage`` (the engine's ``admin_port`` instead); never ``jobs`` or ``workers`` (same
layer), ``chat``, ``handlers`` or ``bot``."""
