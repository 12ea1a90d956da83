"""Services the memory engine composes (the profile, the dense retriever, search_memories). May import the
bottom layers: ``core``, ``config``, ``storage``, ``recall``, ``llm`` and ``prompts``; never ``memory`` or
anything above it."""
