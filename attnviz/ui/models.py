"""The Pretrained page's streamlit layer: a model loaded once per process, traces cached per
TraceRequest."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz.engine.request import TraceRequest
from attnviz.engine.trace import Trace
from attnviz.i18n import localized
from attnviz.serve import tracing, warmup
from attnviz.serve.public import check_model, public
from attnviz.ui import markup
from attnviz.ui.caching import cached_trace
from attnviz.ui.language import lang, t

DTYPES = ["float32", "bfloat16", "auto"]  # "auto": bfloat16 on a GPU, float32 on the CPU


def devices() -> list[str]:
    return ["auto", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@st.cache_resource(max_entries=3, show_spinner=False)
def load(name: str | None, device: str, _progress=None, dtype: str = "float32"):
    """One copy per (name, device, dtype) for the whole process, shared by every session."""
    from attnviz.engine.hooked import load_model

    model = load_model(name or None, device=device, progress=_progress, dtype=dtype)
    tracing.register(model)  # a request names it by its key
    return model


@st.fragment(run_every=0.5)
def _wait_for_bundled() -> None:
    """Progress while the background loader works; the whole page reruns once it is done."""
    if warmup.ready():
        st.rerun()
    message, seconds = warmup.progress()
    msg = markup.escape(localized(message, lang()))
    st.info(t("serve.loading", msg=msg, s=seconds), icon=":material/hourglass_top:")


def get_model(name: str | None, device: str, dtype: str = "float32"):
    """The model, with progress while it loads and a clear message (None) when it cannot.

    The bundled model comes from the background loader started with the server
    (attnviz.serve.warmup): until it is ready the page shows its progress and returns None. Names
    are shown as code and messages escaped: nothing typed becomes Markdown. In public mode a name
    outside the allowlist is refused before anything looks at the disk or the Hub, and a failure
    says only that the model could not be loaded (no paths, no library errors)."""
    if name is None and device == "auto" and dtype == "float32":
        warmup.start()
        if not warmup.ready():
            _wait_for_bundled()
            return None
        try:
            return warmup.bundled_model()
        except (ValueError, OSError, RuntimeError) as err:
            msg = t("bert.load_failed_public") if public() else markup.escape(err)
            st.error(t("bert.load_failed", name=t("bert.bundled"), msg=msg))
            return None
    try:
        name = check_model(name)
    except (ValueError, TypeError) as err:  # a malformed name, or one outside public mode's list
        _failure(t("bert.name_refused"), err)
        return None
    shown = markup.code(name) if name else t("bert.bundled")
    with st.status(t("bert.loading", name=shown), expanded=False) as status:
        try:
            model = load(
                name,
                device,
                _progress=lambda m: status.update(label=markup.escape(localized(m, lang()))),
                dtype=dtype,
            )
        except (ValueError, TypeError, OSError, RuntimeError) as err:
            status.update(label=t("bert.not_loaded", name=shown), state="error")
            failed = err
        else:
            status.update(
                label=t("bert.loaded", name=markup.code(model.name), device=model.device),
                state="complete",
            )
            return model
    if public():
        st.error(t("bert.load_failed", name=shown, msg=t("bert.load_failed_public")))
    elif lang() == "en":
        st.error(t("bert.load_failed", name=shown, msg=markup.escape(failed)))
    else:
        _failure(t("bert.load_failed_short", name=shown), failed)
    return None


def _failure(summary: str, err: BaseException) -> None:
    """The engine's messages are English: in English, the message; else a translated summary with
    the original kept below it."""
    if lang() == "en":
        st.error(markup.escape(err))
        return
    st.error(summary)
    with st.expander(t("bert.error_original")):
        st.code(str(err), language=None, wrap_lines=True)


def request(model, text: str, pair: str | None = None, **knobs) -> TraceRequest:
    """The request for a trace of `model` (its key) with what-if `knobs` (use_scale, temperature,
    ablate, mask_tokens), checked: equal settings give equal requests."""
    return TraceRequest.of(model.key, text, pair, **knobs)


def model_trace(model, req: TraceRequest) -> Trace:
    """The trace `req` asks for, from the byte-bounded cache shared read-only between sessions
    (attnviz.ui.caching), made with the other short sentences of its group waiting then."""
    return cached_trace(req, model)
