"""Settings (the only code that reads the environment) and logging setup. May import ``companion.core``."""
