"""Text normal forms: what we store (NFC, no control characters) and what a stored keyword looks like."""

from __future__ import annotations

import re
import unicodedata

MAX_KEYWORD_CHARS = 20
# A memory's words at most, however they come (a save, an edit, a tool, a Dida365 card): a memory is a
# sentence to recall, not a document; a backup cell (4,096) would cut a longer one on restore.
MAX_MEMORY_CHARS = 200
_SEPARATORS = re.compile(r"[,，、;；\s]+")
_SPACES = re.compile(r"\s+")
_DROPPED = frozenset({"Cc", "Cf", "Cs", "Co"})
# Kept of those: line breaks and tabs (folded below), and the zero-width joiner, which makes one emoji of several
# ("👨‍👩‍👧"); without it the family would be stored as three people.
_KEPT = frozenset("\n\t\u200d")


def normalize_text(text: str) -> str:
    """NFC, no control or zero-width characters (but the joiner inside emoji), whitespace folded: the form we
    store. NFC, not NFKC, so full-width Chinese punctuation stays as the user wrote it."""
    text = unicodedata.normalize("NFC", text)
    # Printable text has none of those categories: most text skips the per-character walk.
    if not text.isprintable():
        text = "".join(ch for ch in text if unicodedata.category(ch) not in _DROPPED or ch in _KEPT)
    return _SPACES.sub(" ", text).strip()


def normalize_keyword(word: str) -> str:
    """A stored keyword: lower case, no separators (they delimit keywords in CSV), at most 20 chars."""
    word = _SEPARATORS.sub("", unicodedata.normalize("NFKC", normalize_text(word)).lower())
    return word[:MAX_KEYWORD_CHARS]


# A lone surrogate, and the C0 control characters but tab, newline and carriage return (NUL among them, which
# PostgreSQL's text refuses while SQLite keeps it).
_UNSENDABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")


def sendable(text: str) -> str:
    """Text that can be encoded to UTF-8, sent on (to the model, to Telegram) and stored on every backend
    alike: a lone surrogate (a JSON ``\\ud800`` without its pair) and a control character no one types (NUL,
    ESC, ...) each become U+FFFD, one UTF-16 unit for one, so Telegram's entity offsets still point at the same
    characters. Everything else, emoji sequences joined by U+200D included, is kept exactly as written."""
    return _UNSENDABLE.sub("\ufffd", text) if _UNSENDABLE.search(text) else text
