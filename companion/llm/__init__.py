"""The LLM client and the embedding backends: all HTTP to OpenAI-compatible models. May import ``companion.core``."""
