"""Services and value types the memory engine composes (the profile, explicit-save judging, the dense
retriever, search_memories, the config and reports). May import the bottom layers: ``core``, ``config``,
``storage``, ``recall``, ``llm`` and ``prompts``; never ``memory`` or anything above it."""
