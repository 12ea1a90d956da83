"""The LLM client, typed tools and the bounded tool loop, and the embedding backends: all HTTP to
OpenAI-compatible models. May import ``companion.core``."""
