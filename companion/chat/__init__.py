"""The conversation pipeline shared by Telegram and the console: persona, reply prompt, short-term
context, companion mode as cached from the store, the message buffer and the Chinese texts users read.
May import ``memory`` and everything below."""
