"""Services the memory engine composes (the profile). May import the bottom layers: ``core``, ``config``,
``storage``, ``recall``, ``llm`` and ``prompts``; never ``memory`` or anything above it."""
