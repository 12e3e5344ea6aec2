"""Pretrained model (BERT, GPT-2, Llama, Qwen, Mistral, BART...): the real model's attention,
every tensor, plus what-if knobs with a diff and, for decoders, the next token."""

import streamlit as st

from attnviz import ui
from attnviz.measures import whatif
from attnviz.serve.public import allowed_models, public
from attnviz.ui import explorer, markup, models, pretrained, url
from attnviz.ui import whatif as whatif_panel
from attnviz.ui.explorer.pickers import followed_head
from attnviz.views import registry

t = ui.t
st.title(t("pretrained.title"))
st.caption(t("pretrained.intro"))

with st.sidebar:
    if public():  # a class server: only the allowlist, never a typed name or folder
        name = st.selectbox(t("pretrained.model_public"), allowed_models(), **url.bound("model"))
        models.public_facts(name)
    else:  # a bundled model, or a name typed below it
        name = models.pick_model("pick", "model", t("pick.label"), t("pick.other"))
    device = ui.url_select(
        st.selectbox,
        t("pretrained.device"),
        models.devices(),
        "device",
        url.default("device"),
        format_func={d: t(f"pretrained.device.{d}") for d in models.devices()}.get,
    )
    dtype = ui.url_select(  # by value in the URL: the "auto" option is translated
        st.selectbox,
        t("pm.dtype"),
        models.DTYPES,
        "dtype",
        url.default("dtype"),
        help=t("pm.dtype_help"),
        format_func={**{d: d for d in models.DTYPES}, "auto": t("pretrained.device.auto")}.get,
    )

if models.not_installed(name.strip()):  # a registry LLM before `attnviz models`: the command
    st.stop()
try:
    model = models.get_model(name.strip() or None, device, dtype)
except Exception as err:  # noqa: BLE001 - any loader failure (e.g. a broken mirror's files): a message
    shown = markup.code(name.strip()) if name.strip() else t("pretrained.bundled")
    why = (
        t("pretrained.load_failed_public")
        if public()
        else markup.escape(f"{type(err).__name__}: {err}")
    )
    st.error(t("pretrained.load_failed", name=shown, msg=why))
    model = None
if model is None:
    st.stop()
pretrained.summary(model)
text = pretrained.document() or ui.text()  # a long document pasted or uploaded, else the sidebar
if model.kind == "encoder-decoder":
    st.caption(t("pm.pair_is_target"))

# The trace is made in the folded panel below; its spinner (after 0.5 s: a long input) shows here.
waiting = st.empty()


def traced(request):
    with waiting.container(), st.spinner(t("long.tracing", chars=len(text)), show_time=True):
        return models.model_trace(model, request)


# Folded: open, the knobs and results put the views ~900 px down the page. What a knob changed
# shows right below it in one row (whatif_panel.results), and names the silenced heads.
with st.expander(t("pretrained.whatif"), expanded=False):
    st.caption(t("pretrained.whatif_help"))
    c1, c2 = st.columns([1, 1])
    use_scale = c1.toggle(t("pg.scale"), value=url.default("wi_scale"), **url.bound("wi_scale"))
    temperature = c2.number_input(
        t("pg.temperature"), 0.05, 20.0, value=url.default("wi_temp"), step=0.25,
        **url.bound("wi_temp"),
    )  # fmt: skip
    head_ids = pretrained.head_choices(model)
    # exactly what is picked: no "Select N matches" (typing L3H1 and Enter once silenced L3H1,
    # L3H10 and L3H11); typed text matches anywhere, the first match in order is L3H1 itself
    ablate_ids = st.multiselect(
        t("pretrained.ablate"),
        list(head_ids),
        placeholder=t("pretrained.pick_heads"),
        **ui.EXACT,
        **url.bound("wi_silence"),
    )
    base_trace = None
    try:
        base_request = models.request(model, text, ui.pair())
        base_trace = traced(base_request)
    except (ValueError, TypeError) as err:  # said above the folded panel, where it is seen
        waiting.info(ui.input_problem(err))
        st.stop()
    tokens = base_trace.tokens
    # positions in the URL, not labels ("3: the"); typing 1 and Enter hides position 1 alone
    url.seed_list("wi_hide", list(range(len(tokens))))
    masked = st.multiselect(
        t("pretrained.mask"),
        range(len(tokens)),
        format_func=ui.numbered(tokens),
        placeholder=t("pretrained.pick_tokens"),
        **ui.EXACT,
        key="wi_hide",
    )
    url.sync_list("wi_hide")

ablate = tuple(head_ids[x] for x in ablate_ids if x in head_ids)
request = models.request(
    model, text, ui.pair(), use_scale=use_scale, temperature=float(temperature), ablate=ablate,
    mask_tokens=tuple(masked),
)  # fmt: skip
changed = request != base_request  # a knob was turned
trace = traced(request) if changed else base_trace
waiting.empty()
full_trace, full_base = trace, base_trace
part = pretrained.pick_part(model)
trace, base_trace = full_trace.part(part), full_base.part(part)
pretrained.length_note(model, full_trace)  # tokens, the budget, what was cut and why
n_unk = sum(tok == "[UNK]" for tok in trace.tokens)
if n_unk:
    st.warning(t("pretrained.unk", n=n_unk))

follow = None
if changed:
    follow = followed_head(trace)
    whatif_panel.results(whatif.compare(trace, base_trace), trace, base_trace, follow)
else:
    st.caption(t("pretrained.no_change"))
if model.kind != "encoder":
    pretrained.next_tokens(model, full_trace, full_base if changed else None)

explorer.explorer(trace, "overview", registry.NAMES, follow=follow, words=True)

ui.lesson_nav("pretrained")
