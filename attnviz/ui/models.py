"""The Pretrained page's streamlit layer: the model picker (bundled models, or a typed name), a
model loaded once per process, traces cached per TraceRequest."""

from __future__ import annotations

import streamlit as st
import torch

from attnviz.engine.budget import size
from attnviz.engine.bundled import FETCH_COMMAND, REGISTRY, TRAINED, BundledModel, bundled_models
from attnviz.engine.hooked.families import DEFAULT_NAME
from attnviz.engine.request import TraceRequest
from attnviz.engine.trace import Trace
from attnviz.i18n import localized
from attnviz.serve import tracing, warmup
from attnviz.serve.public import check_model, public
from attnviz.ui import markup, url
from attnviz.ui.caching import cached_trace
from attnviz.ui.language import lang, t
from attnviz.ui.widgets import follow_default, url_select

_MOVED = "_typed_moved_"  # the bundled name last moved from a model box to its picker
_UNKNOWN = "_pick_unknown_"  # a link's name for a picker that is none of its models
DTYPES = ["float32", "bfloat16", "auto"]  # "auto": bfloat16 on a GPU, float32 on the CPU


def pick_model(
    pick: str,
    typed: str,
    label: str,
    typed_label: str,
    kind: str | None = None,
    none: str | None = None,
):
    """The model a page loads: a name typed in the box `typed` (a folder, a .gguf file or a Hub
    id) when there is one, else the bundled model chosen in the picker `pick` (both URL keys),
    with what it is and its licence beside it. Returns the name ("" for the default encoder, or
    for the option `none` labels first where a page may load no model); `not_installed` then
    says whether it is there."""
    models = {m.name: m for m in bundled_models() if kind is None or m.kind == kind}
    default = url.default(pick, lang=lang())
    follow_default(pick, default)  # a page's default by language, until one is picked
    _typed_to_picker(pick, typed, models)
    options = [""] * (none is not None) + list(models)
    unknown = _unknown_pick(pick, options)
    chosen = url_select(
        st.selectbox, label, options, pick, default,
        format_func=_pick_label(models, none), help=t("pick.help", command=FETCH_COMMAND),
    )  # fmt: skip
    if unknown and chosen == default:  # until another is picked
        names = ", ".join(markup.code(n) for n in models)
        shown = markup.code(_pick_label(models, none)(default)) if default else none or ""
        st.warning(t("pick.unknown", name=markup.code(unknown), names=names, default=shown))
    else:
        st.session_state.pop(_UNKNOWN + pick, None)
    name = st.text_input(typed_label, help=t("pretrained.model_help"), **url.bound(typed)).strip()
    if name and name not in models:
        return name
    chosen = name or chosen  # a link's bundled name, in the picker from the next run
    if chosen in models:
        st.caption(facts(models[chosen]))
    return "" if chosen == DEFAULT_NAME else chosen


def _unknown_pick(pick: str, options: list[str]) -> str | None:
    """A name a link gave the picker that is none of its models (?pick=nope), kept for the
    session until another model is picked: the picker falls back to its default, which the
    page says, with the names it knows."""
    given = url.values(pick)
    if given and given[-1] not in options:
        st.session_state[_UNKNOWN + pick] = given[-1]
    return st.session_state.get(_UNKNOWN + pick)


def _typed_to_picker(pick: str, typed: str, models: dict[str, BundledModel]) -> None:
    """A bundled model's name typed in the box, or given by a link (`model=smollm2-135m`), moves
    to the picker before either is drawn: the picker shows the model that is loaded, with its
    facts and licence, and the URL holds it as `pick`. The box empties from the next run (on a
    link's first run Streamlit seeds a URL-bound box from the link, over session state); a name
    already moved does not move again, so a model picked after it stays picked."""
    moved = _MOVED + typed
    value = st.session_state.get(typed, url.read(typed))
    name = value.strip() if isinstance(value, str) else ""
    if name not in models:
        st.session_state.pop(moved, None)
        return
    if st.session_state.get(moved) != name:
        st.session_state[pick] = name
    st.session_state[moved] = name
    st.session_state[typed] = ""
    url.drop(typed)


def public_facts(name: str) -> None:
    """Public mode's list: what the chosen model is and its licence, where it is a bundled one."""
    found = {m.name: m for m in bundled_models()}.get(name)
    if found is not None:
        st.caption(facts(found))


def not_installed(name: str) -> bool:
    """Whether `name` is a bundled model that is not installed here, after a message saying the
    command that installs it (a registry LLM before `attnviz models`)."""
    found = {m.name: m for m in bundled_models()}.get(name)
    if found is None or found.installed:
        return False
    st.warning(t("pick.missing", name=markup.code(name), command=FETCH_COMMAND))
    return True


def _pick_label(models: dict[str, BundledModel], none: str | None = None):
    """The picker's format_func: a name, marked when it is not installed, and `none` for "".
    A table's lookup, made here (over the names and flags only: a widget keeps its format_func
    with the session), so the widget never calls back into this module."""
    mark = t("pick.not_installed")
    labels = {"": none or ""}
    for name, model in models.items():
        short = name.rsplit("/", 1)[-1]  # all-MiniLM-L6-v2, not its Hub owner
        labels[name] = short if model.installed else f"{short} ({mark})"
    return labels.__getitem__


def facts(model: BundledModel) -> str:
    """One line on a bundled model: kind, languages, parameters, size, licence and source."""
    return t(
        "pick.facts",
        kind=t(f"pm.kind.{model.kind}"),
        langs=t("pick.lang_sep").join(t(f"pick.lang.{code}") for code in model.languages),
        params=f"{model.parameters / 1e6:.0f}M" if model.parameters else "?",
        size=size(model.size_bytes),
        licence=markup.code(model.licence),  # names, as written: "Gemma Terms of Use"
        source=_source(model),
    )


def _source(model: BundledModel) -> str:
    """Where a bundled model comes from, in the page's language (package names as code)."""
    found = REGISTRY.get(model.name)
    if found is not None and len(found.packages) > 1:  # Gemma: a package and its chunk packages
        package = markup.code(found.packages[0])
        return t("pick.source_chunks", package=package, n=len(found.packages) - 1)
    if model.name in TRAINED:
        return t("pick.source_trained", script=markup.code("scripts/make_models.py"))
    if model.source.startswith("PyPI: "):
        return t("pick.source_pypi", package=markup.code(model.source.removeprefix("PyPI: ")))
    return markup.code(model.source)


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
            msg = t("pretrained.load_failed_public") if public() else markup.escape(err)
            st.error(t("pretrained.load_failed", name=t("pretrained.bundled"), msg=msg))
            return None
    try:
        name = check_model(name)
    except (ValueError, TypeError) as err:  # a malformed name, or one outside public mode's list
        _failure(t("pretrained.name_refused"), err)
        return None
    shown = markup.code(name) if name else t("pretrained.bundled")
    with st.status(t("pretrained.loading", name=shown), expanded=False) as status:
        try:
            model = load(
                name,
                device,
                _progress=lambda m: status.update(label=markup.escape(localized(m, lang()))),
                dtype=dtype,
            )
        except (ValueError, TypeError, OSError, RuntimeError) as err:
            status.update(label=t("pretrained.not_loaded", name=shown), state="error")
            failed = err
        else:
            status.update(
                label=t("pretrained.loaded", name=markup.code(model.name), device=model.device),
                state="complete",
            )
            return model
    if public():
        st.error(t("pretrained.load_failed", name=shown, msg=t("pretrained.load_failed_public")))
    elif lang() == "en":
        st.error(t("pretrained.load_failed", name=shown, msg=markup.escape(failed)))
    else:
        _failure(t("pretrained.load_failed_short", name=shown), failed)
    return None


def _failure(summary: str, err: BaseException) -> None:
    """The engine's messages are English: in English, the message; else a translated summary with
    the original kept below it."""
    if lang() == "en":
        st.error(markup.escape(err))
        return
    st.error(summary)
    with st.expander(t("pretrained.error_original")):
        st.code(str(err), language=None, wrap_lines=True)


def request(model, text: str, pair: str | None = None, **knobs) -> TraceRequest:
    """The request for a trace of `model` (its key) with what-if `knobs` (use_scale, temperature,
    ablate, mask_tokens), checked: equal settings give equal requests."""
    return TraceRequest.of(model.key, text, pair, **knobs)


def model_trace(model, req: TraceRequest) -> Trace:
    """The trace `req` asks for, from the byte-bounded cache shared read-only between sessions
    (attnviz.ui.caching), made with the other short sentences of its group waiting then."""
    return cached_trace(req, model)
