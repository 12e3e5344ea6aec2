"""A token as a screen shows it: whitespace drawn, so a token that is a space or a line break is
never a blank label, and Markdown cannot swallow runs of them. No streamlit."""

from __future__ import annotations

# What each whitespace character is drawn as; any other whitespace is drawn as a space.
SHOWN = {" ": "␣", "\n": "⏎", "\r": "␍", "\t": "⇥", "\u3000": "␣", "\xa0": "␣"}


def visible(text: str) -> str:
    """`text` with every whitespace character drawn: ␣ a space, ⏎ a line break, ⇥ a tab."""
    return "".join(SHOWN.get(c, "␣" if c.isspace() else c) for c in text)


def piece(token: str, decoded: str) -> str:
    """A generated token's text as it stands in the running text: its own decoding, with the
    word-start space a SentencePiece tokenizer drops when one token is decoded alone (▁the)."""
    if token.startswith("▁") and not decoded.startswith(" "):
        return " " + decoded
    return decoded
