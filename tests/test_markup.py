"""markup.escape / markup.code: user text shown literally inside Streamlit Markdown."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from attnviz.ui.markup import code, escape

ACTIVE = set("\\`*_{}[]()#+-.!|<>:$~=&")


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text())
def test_every_active_character_is_escaped(text: str) -> None:
    out = escape(text)
    assert "\n" not in out and "\r" not in out
    i = 0
    while i < len(out):  # each active character is preceded by its own backslash
        if out[i] == "\\":
            assert i + 1 < len(out) and out[i + 1] in ACTIVE
            i += 2
            continue
        assert out[i] not in ACTIVE, (text, out, i)
        i += 1


def test_escape_keeps_plain_text_readable() -> None:
    assert escape("didn't, really?") == "didn't, really?"
    assert escape(":red[x] **b**") == r"\:red\[x\] \*\*b\*\*"


@settings(max_examples=300, derandomize=True, database=None)
@given(st.text(min_size=1))
def test_code_span_is_never_closed_early(text: str) -> None:
    out = code(text)
    fence = re.match("`+", out).group()
    inner = out[len(fence) : -len(fence)]
    assert out.endswith(fence)
    assert fence not in re.findall("`+", inner)  # no run inside as long as the fence
