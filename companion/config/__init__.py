"""Settings (the only code that reads the environment), logging setup, and the process runtime (event loop,
heap). May import ``companion.core``."""
