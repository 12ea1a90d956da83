"""The companion's library, in layers; imports only point down (``tests/test_layers.py`` enforces it).

Bottom, knowing nothing of the engine: ``core`` (data types, pure rules, errors), then ``config``,
``storage``, ``recall``, ``llm`` (and the top-level ``prompts`` package), which import only ``core``.
``engine`` (the engine's services and the memory tools every host offers a model) sits on those; the
top-level ``memory.py`` (the engine API) on top of ``engine``; ``chat`` (the conversation pipeline), ``ops``
(jobs, backup, restore) and ``kanban`` (the optional Dida365 kanban) above the engine; ``hosts`` (the
console, above ``chat``, and the AstrBot plugin) above those. Nothing here imports aiogram:
``handlers/`` and ``bot.py`` sit above all. ``pip install .`` needs only what the engine (``memory.py``,
``engine`` and below, but ``config``) imports; ``chat``, ``config``, ``ops`` and the console need the
extras ``[bot]`` and ``[ops]``.
"""
