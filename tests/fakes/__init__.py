"""Network-edge fakes: local HTTP servers that the real aiogram and openai clients talk to."""

from .llm import FakeLLM
from .telegram import FakeTelegram

__all__ = ["FakeLLM", "FakeTelegram"]
