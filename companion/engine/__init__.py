"""Services and value types the memory engine composes: the writer (every change to a scope's memories,
under the scope's lock), the scope locks (``ScopeLocks``, asyncio in one process), the index cache, the
learner (what the model is asked to learn), consolidation (queued turns into memories, conversation
summaries), the reply's context and a turn's two store calls, the curator (the user's steering) and its
part of the engine's API (``steering_api``), short-term memory, the profile, explicit-save judging, the
dense retriever, and the config and reports. May import the bottom layers: ``core``, ``storage`` (its
protocols and factory), ``recall``, ``llm`` and ``prompts``; never the bot's settings (``config``: a
host builds the engine's config), ``memory`` or anything above it."""
