"""The BERT page's streamlit layer: a model loaded once per process, traces cached per input."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz.trace import Trace
from attnviz.ui.common import t


def devices() -> list[str]:
    return ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.cache_resource(max_entries=3, show_spinner=False)
def load_bert(name: str | None, device: str, _progress=None):
    """One copy per (name, device) for the whole process, shared by every session."""
    from attnviz.hooked import load_model

    return load_model(name or None, device=device, progress=_progress)


def get_model(name: str | None, device: str):
    """The model, with progress while it loads and a clear message (None) when it cannot."""
    shown = name or t("bert.bundled")
    failure = None
    with st.status(t("bert.loading", name=shown), expanded=False) as status:
        try:
            model = load_bert(name or None, device, _progress=lambda m: status.update(label=m))
        except (ValueError, OSError, RuntimeError) as err:
            # The last progress line ("Finding ...") must not stay as if the load were going on.
            status.update(label=t("bert.load_failed_status", name=shown), state="error")
            failure = err
        else:
            status.update(
                label=t("bert.loaded", name=model.name, device=model.device), state="complete"
            )
    if failure is not None:
        st.error(t("bert.load_failed_short", name=shown))
        with st.expander(t("bert.load_details")):
            st.code(str(failure), language=None, wrap_lines=True)  # the loader's own words
        return None
    return model


@st.cache_resource(max_entries=24, show_spinner=False)
def bert_trace(
    _model,
    model_key: tuple[str, str],
    text: str,
    pair: str | None,
    use_scale: bool = True,
    temperature: float = 1.0,
    ablate: tuple[tuple[int, int], ...] = (),
    mask_tokens: tuple[int, ...] = (),
) -> Trace:
    """A trace per (model, text, knobs); shared read-only between sessions."""
    from attnviz.hooked import trace_model

    return trace_model(
        _model,
        text,
        text_pair=pair,
        use_scale=use_scale,
        temperature=temperature,
        ablate=ablate,
        mask_tokens=mask_tokens,
    )
