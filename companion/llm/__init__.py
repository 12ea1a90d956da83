"""The LLM client: all HTTP to the OpenAI-compatible model. May import ``companion.core``."""
