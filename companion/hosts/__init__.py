"""Hosts that embed the memory engine in another bot framework: ``astrbot`` (the AstrBot plugin). A host
may import ``memory`` and every layer below it (never ``companion.chat``, ``companion.ops``, the console
or the Telegram handlers); only ``companion.hosts.astrbot`` may import ``astrbot``, and only in its
``main.py``, which the plugin build puts at the plugin's root."""
