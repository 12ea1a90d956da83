"""Keywords (jieba, shipped dictionaries), the per-scope recall index, rank fusion and search filters. May
import ``companion.core``."""
