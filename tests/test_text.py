"""The stored text form: equal to the plain per-character rule on any text, printable or not."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from companion.core.text import normalize_text, sendable


def _plain(text: str) -> str:
    text = unicodedata.normalize("NFC", text)
    text = "".join(ch for ch in text if unicodedata.category(ch) not in {"Cc", "Cf", "Cs", "Co"} or ch in "\n\t\u200d")
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
    ("全家👨‍👩‍👧", "全家👨‍👩‍👧"),  # one family emoji
])
def test_examples(raw: str, stored: str) -> None:
    assert normalize_text(raw) == stored


@pytest.mark.parametrize(("raw", "sent"), [
    ("我对花生过敏", "我对花生过敏"),                      # most text: the same object back
    ("a\x00b", "a\ufffdb"),                              # NUL: PostgreSQL's text refuses it
    ("\x1b[31m红\x07", "\ufffd[31m红\ufffd"),           # ESC, BEL
    ("一\n二\t三\r", "一\n二\t三\r"),                 # line breaks and tabs stay
    ("x\ud800y", "x\ufffdy"),                            # a lone surrogate
    ("\U0001f468\u200d\U0001f469", "\U0001f468\u200d\U0001f469"),  # an emoji sequence stays whole
])
def test_sendable(raw: str, sent: str) -> None:
    assert sendable(raw) == sent


@given(st.text(alphabet=st.characters(codec=None), max_size=60))
def test_sendable_keeps_utf16_length_and_leaves_nothing_postgresql_refuses(text: str) -> None:
    sent = sendable(text)
    assert len(sent.encode("utf-16-le", "surrogatepass")) == len(text.encode("utf-16-le", "surrogatepass"))
    assert "\x00" not in sent
    sent.encode("utf-8")  # a lone surrogate would raise here
