"""Keywords (jieba, shipped dictionaries) and the per-scope recall index. May import ``companion.core``."""
