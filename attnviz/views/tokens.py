"""A token as a screen shows it: the one rule is attnviz.engine.hooked.labels.shown (␣ a space,
⏎ a line break, ⇥ a tab, ◌ or <0xNN> a part of a character), so a token that is a space is never a
blank label, Markdown cannot swallow runs of them, and a tokenizer's marks (Ġ, ▁, Ċ) never show.
`legend` is the one line that explains the marks a view shows. No streamlit."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from attnviz.engine.hooked.labels import CONTINUATION, shown

__all__ = ["legend", "piece", "shown"]

# Each mark and the legend's key that explains it, in the order the legend lists them.
_LEGEND = (("␣", "tok.mark_space"), ("⏎", "tok.mark_newline"), ("⇥", "tok.mark_tab"),
           (CONTINUATION, "tok.mark_part"), ("<0x", "tok.mark_byte"))  # fmt: skip


def legend(tokens: Iterable[str], tr: Callable[..., str]) -> str:
    """The one-line legend of the marks that `tokens` show once drawn ("␣ = a space before the
    word · ⏎ = a line break"), in the language of `tr`; "" when they show none."""
    drawn = "".join(shown(str(t)) for t in tokens)
    return " · ".join(tr(key) for mark, key in _LEGEND if mark in drawn)


def piece(token: str, decoded: str) -> str:
    """A generated token's text as it stands in the running text: its own decoding, with the
    word-start space a SentencePiece tokenizer drops when one token is decoded alone (▁the)."""
    if token.startswith("▁") and not decoded.startswith(" "):
        return " " + decoded
    return decoded
