"""The hosts that are not Telegram: ``console`` (the terminal: the chat pipeline on standard input and output)
and ``astrbot`` (the AstrBot plugin, the engine in another bot framework). The Telegram host is ``handlers/``
with ``bot.py`` as its composition root, laid out as aiogram's examples are. What every host shares sits below
them (``companion.engine``: the memory tools, the learning cadence, the weekly summary, the follow-up threads;
``companion.core``: the export's CSV form); a host brings the edges: the scope of each event, sending, its
clock. The console may import the chat pipeline; the AstrBot plugin imports ``memory`` and the layers below it
only (never ``companion.chat``, ``companion.ops`` or the Telegram handlers), and only
``companion.hosts.astrbot`` imports ``astrbot``, in its ``main.py``, which the plugin build puts at the
plugin's root."""
