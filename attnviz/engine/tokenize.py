"""The toy stack's tokenizer: one token per CJK character, words and punctuation otherwise."""

from __future__ import annotations

import re

from attnviz.engine.errors import EmptyInput

# CJK ideographs (unified, ext. A, compatibility), kana, hangul, CJK punctuation: one token each.
_CJK = (
    r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
    r"\U00020000-\U0002fa1f]"
)
# A word keeps inner apostrophes and hyphens ("didn't", "self-attention").
_WORD = r"[^\W_]+(?:['’\-][^\W_]+)*"
_TOKEN = re.compile(rf"{_CJK}|{_WORD}|\S", re.UNICODE)
_CJK_RE = re.compile(_CJK)


def tokenize(text: str) -> list[str]:
    """Split `text` into tokens; raises ValueError for text with nothing to attend to."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    tokens: list[str] = []
    for match in _TOKEN.finditer(text):
        piece = match.group()
        # \w matches CJK too, so a word may have swallowed ideographs: split them out one by one.
        if len(piece) > 1 and _CJK_RE.search(piece):
            tokens.extend(p for p in re.split(rf"({_CJK})", piece) if p)
        else:
            tokens.append(piece)
    if not tokens:
        raise EmptyInput(
            "The text is empty: type a sentence (for example 'The cat sat.' or '我爱水课')."
        )
    return tokens
