"""The BERT page's streamlit layer: a model loaded once per process, traces cached per input."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz import warmup
from attnviz.trace import Trace
from attnviz.ui.caching import cached_trace
from attnviz.ui.common import t


def devices() -> list[str]:
    return ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.cache_resource(max_entries=3, show_spinner=False)
def load_bert(name: str | None, device: str, _progress=None):
    """One copy per (name, device) for the whole process, shared by every session."""
    from attnviz.hooked import load_model

    return load_model(name or None, device=device, progress=_progress)


@st.fragment(run_every=0.5)
def _wait_for_bundled() -> None:
    """Progress while the background loader works; the whole page reruns once it is done."""
    if warmup.ready():
        st.rerun()
    message, seconds = warmup.progress()
    st.info(t("serve.loading", msg=message, s=seconds), icon=":material/hourglass_top:")


def get_model(name: str | None, device: str):
    """The model, with progress while it loads and a clear message (None) when it cannot.

    The bundled model comes from the background loader started with the server (attnviz.warmup):
    until it is ready the page shows its progress and returns None."""
    if name is None and device == "auto":
        warmup.start()
        if not warmup.ready():
            _wait_for_bundled()
            return None
        try:
            return warmup.bundled_model()
        except (ValueError, OSError, RuntimeError) as err:
            st.error(t("bert.load_failed", name=t("bert.bundled"), msg=err))
            return None
    try:
        with st.status(t("bert.loading", name=name or t("bert.bundled")), expanded=False) as status:
            model = load_bert(name or None, device, _progress=lambda m: status.update(label=m))
            status.update(
                label=t("bert.loaded", name=model.name, device=model.device), state="complete"
            )
        return model
    except (ValueError, OSError, RuntimeError) as err:
        st.error(t("bert.load_failed", name=name or t("bert.bundled"), msg=err))
        return None


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
    """A trace per (model, text, knobs); shared read-only between sessions, in the byte-bounded
    cache (attnviz.ui.caching)."""
    from attnviz.hooked import trace_model

    key = ("bert", model_key, text, pair, use_scale, temperature, ablate, mask_tokens)
    return cached_trace(
        key,
        lambda: trace_model(
            _model,
            text,
            text_pair=pair,
            use_scale=use_scale,
            temperature=temperature,
            ablate=ablate,
            mask_tokens=mask_tokens,
        ),
    )
