"""Showing user text inside Markdown without it becoming Markdown.

Streamlit renders st.error / st.info / st.caption / st.markdown bodies, status and expander labels
and radio options as GitHub Markdown plus its own directives (`:red[...]`, `:material/icon:`,
emoji shortcodes, `$...$` LaTeX). A model name or an error message that repeats user text must go
through `escape` (every punctuation mark Markdown gives a meaning to backslash-escaped, and line
breaks flattened) or be shown as `code`.
"""

from __future__ import annotations

import re

# The ASCII punctuation that Markdown, HTML entities and Streamlit's directives give a meaning to;
# quotes, commas, "?" and "/" mean nothing alone and stay as they are ("didn't", not "didn\\'t").
_ACTIVE = "\\`*_{}[]()#+-.!|<>:$~=&"
_PUNCT = re.compile("([" + re.escape(_ACTIVE) + "])")
_BREAKS = re.compile(r"[\r\n\t\f\v\u2028\u2029\x00-\x08\x0b-\x1f\x7f]+")
_TICKS = re.compile("`+")


def escape(text: object) -> str:
    """`text` as literal characters in Markdown: no emphasis, links, HTML, directives or LaTeX
    (each active punctuation mark backslash-escaped, as CommonMark allows)."""
    return _PUNCT.sub(r"\\\1", _BREAKS.sub(" ", str(text)))


def code(text: object) -> str:
    """`text` as an inline code span (literal by definition), fenced with more backticks than any
    run inside it."""
    flat = _BREAKS.sub(" ", str(text))
    runs = [len(m.group()) for m in _TICKS.finditer(flat)]
    fence = "`" * (max(runs, default=0) + 1)
    return f"{fence} {flat} {fence}"
