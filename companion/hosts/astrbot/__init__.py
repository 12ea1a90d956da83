"""The AstrBot plugin: ``main.py`` (the ``Star`` AstrBot loads; the only module importing ``astrbot``),
``service`` (the plugin's behaviour on the engine, free of AstrBot so it is tested in the shared venv),
``tools`` (the engine's memory tools under the plugin's names), ``arguments`` (the bounds of command
arguments), ``fences`` (what the plugin puts into a
request, and its removal from the saved history), ``scopes`` (AstrBot's platform, group and sender ids as
the engine's scopes), ``options`` (the WebUI config), ``importing`` (other memory plugins' JSON files),
``texts`` (what users read), ``build`` (the plugin folder and zip). May import ``memory`` and the layers
below it; ``main`` imports the engine only once AstrBot is up."""
