"""The AstrBot plugin: ``main.py`` (the ``Star`` AstrBot loads; the only module importing ``astrbot``),
``service`` (the plugin's behaviour on the engine, free of AstrBot so it is tested in the shared venv),
``scopes`` (AstrBot's platform, group and sender ids as the engine's scopes), ``options`` (the WebUI
config), ``importing`` (other memory plugins' JSON files), ``texts`` (what users read), ``build`` (the
plugin folder and zip). May import ``memory`` and the layers below it."""
