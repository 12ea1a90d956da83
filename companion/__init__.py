"""Companion library: memory, storage, LLM and conversation logic.

Nothing in this package knows about Telegram; the aiogram layer lives in ``handlers/`` and ``bot.py``.
"""
