"""Services and value types the memory engine composes: the writer (every change to a scope's memories,
under the scope's lock), the scope locks (``ScopeLocks``, asyncio in one process), the index cache, the
learner (what the model is asked to learn), consolidation (queued turns into memories, conversation
summaries), a reply's turn and its context (``context``: its one read, what it is told, its one write), derived copies
following the change journal (``following``), the curator (the user's steering) and its part of the engine's
API (``steering``), short-term memory, the profile, explicit-save judging, the dense retriever, and the config
and reports (``values``). The rules every host shares: the memory tools (``tools``), when to learn
(``cadence``), the weekly summary (``weekly``), follow-up threads (``followup_threads``). For the layers
above: their narrow ports (``ports``: settings, the kanban; ``admin_port``: the operators' reads;
``maintenance_port``: whole-database work, opened by URL for the offline commands), the copy of one store into
another (``migration``) and snapshot files (``snapshots``).
May import the bottom layers: ``core``, ``storage`` (its protocols, factory and SQLite's maintenance
capability), ``recall``, ``llm`` and ``prompts``; never the bot's settings (``config``: a host builds the
engine's config), ``memory`` or anything above it."""
