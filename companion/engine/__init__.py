"""Services and value types the memory engine composes: the writer (every change to a scope's memories,
under the scope's lock), the index cache, the learner (what the model is asked to learn), consolidation
(queued turns into memories, conversation summaries), the reply's context, the curator (the user's
steering), short-term memory, the profile, explicit-save judging, the dense retriever, and the config
and reports. May import the bottom layers: ``core``, ``storage`` (its protocols and factory),
``recall``, ``llm`` and ``prompts``; never the bot's settings (``config``: a host builds the engine's
config), ``memory`` or anything above it."""
