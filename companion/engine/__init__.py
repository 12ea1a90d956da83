"""Services and value types the memory engine composes (the profile, explicit-save judging, the dense
retriever, search_memories, the config and reports). May import the
anything above it."""
