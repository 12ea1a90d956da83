"""The stored text form: equal to the plain per-character rule on any text, printable or not."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from companion.core.text import normalize_text


def _plain(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) not in {"Cc", "Cf", "Cs", "Co"} or ch in "\n\t")
    return re.sub(r"\s+", " ", text).strip()


@given(st.text(alphabet=st.characters(codec=None), max_size=60))
def test_equals_the_per_character_rule(text: str) -> None:
    assert normalize_text(text) == _plain(text)


@pytest.mark.parametrize(("raw", "stored"), [
    ("我 养了\u200b一只猫", "我 养了一只猫"),      # zero-width space (Cf) goes
    ("  早上\n\n好\t", "早上 好"),                  # whitespace folds
    ("a\x00b\u202ec\ue000d", "abcd"),                # NUL, bidi override, private use
    ("e\u0301", "\u00e9"),                           # NFC
    ("ＡＢＣ，你好", "ＡＢＣ，你好"),                # full width stays (NFC, not NFKC)
])
def test_examples(raw: str, stored: str) -> None:
    assert normalize_text(raw) == stored
