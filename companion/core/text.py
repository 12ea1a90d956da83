"""Text normal forms: what we store (NFC, no control characters) and what a stored keyword looks like."""

from __future__ import annotations

import re
import unicodedata

MAX_KEYWORD_CHARS = 20
_SEPARATORS = re.compile(r"[,，、;；\s]+")
_SPACES = re.compile(r"\s+")
_DROPPED = frozenset({"Cc", "Cf", "Cs", "Co"})


def normalize_text(text: str) -> str:
    """NFC, no control or zero-width characters, whitespace folded: the form we store. NFC, not NFKC,
    so full-width Chinese punctuation stays as the user wrote it."""
    text = unicodedata.normalize("NFC", text)
    # Printable text has none of those categories: most text skips the per-character walk.
    if not text.isprintable():
        text = "".join(ch for ch in text if unicodedata.category(ch) not in _DROPPED or ch in "\n\t")
    return _SPACES.sub(" ", text).strip()


def normalize_keyword(word: str) -> str:
    """A stored keyword: lower case, no separators (they delimit keywords in CSV), at most 20 chars."""
    word = _SEPARATORS.sub("", unicodedata.normalize("NFKC", normalize_text(word)).lower())
    return word[:MAX_KEYWORD_CHARS]


_UNSENDABLE = re.compile("[\ud800-\udfff]")


def sendable(text: str) -> str:
    """Text that can be encoded to UTF-8 and sent on (to the model, to Telegram, to SQLite): a lone
    surrogate (a JSON ``\\ud800`` without its pair) becomes U+FFFD, one UTF-16 unit for one, so Telegram's
    entity offsets still point at the same characters. Everything else (NUL included, which encodes and
    stores fine) is kept exactly as the user wrote it."""
    return text if text.isascii() else _UNSENDABLE.sub("\ufffd", text)
