"""The colour scale follows the input's size class: a scale picked on a short sentence does not
stay when a long document comes in (the overview opened on the faint "head max"), and back."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _script() -> None:
    import streamlit as st

    from attnviz.ui.explorer.pickers import pick_scale

    n = st.session_state.get("n_tokens", 12)
    st.markdown(f"scale={pick_scale(n, short='max')}")


def _scale(at: AppTest) -> str:
    return at.markdown[0].value.removeprefix("scale=")


def test_a_scale_picked_on_a_short_input_gives_way_to_the_long_default() -> None:
    at = AppTest.from_function(_script).run(timeout=30)
    assert _scale(at) == "max"  # a short input's default
    at.session_state["wscale"] = "power"  # the user picks a scale on the sentence
    assert _scale(at.run(timeout=30)) == "power"
    at.session_state["n_tokens"] = 4096  # a long document is pasted
    assert _scale(at.run(timeout=30)) == "log"
    at.session_state["wscale"] = "fixed"  # picked on the long input: kept while it stays long
    at.session_state["n_tokens"] = 3000
    assert _scale(at.run(timeout=30)) == "fixed"
    at.session_state["n_tokens"] = 9  # back to a sentence
    assert _scale(at.run(timeout=30)) == "max"
    assert not at.exception
