"""Pretrained BERT: the real model's attention, every tensor, plus what-if knobs with a diff."""

import streamlit as st

from attnviz import ui, whatif
from attnviz.ui import bert, explorer
from attnviz.ui import whatif as whatif_panel

t = ui.t
st.title(t("bert.title"))
st.caption(t("bert.intro"))

with st.sidebar:
    name = st.text_input(
        t("bert.model"), key="model", help=t("bert.model_help"), bind="query-params"
    )
    device = st.selectbox(t("bert.device"), bert.devices(), key="device", bind="query-params")

model = bert.get_model(name.strip() or None, device)
if model is None:
    st.stop()
model_key = (model.name, model.device)

# Folded: open, the knobs and results put the views ~900 px down the page. What a knob changed
# shows right below it in one row (whatif_panel.results), and names the silenced heads.
with st.expander(t("bert.whatif"), expanded=False):
    st.caption(t("bert.whatif_help"))
    c1, c2 = st.columns([1, 1])
    use_scale = c1.toggle(t("pg.scale"), value=True, key="b_scale", bind="query-params")
    temperature = c2.number_input(
        t("pg.temperature"), 0.05, 20.0, value=1.0, step=0.25, key="b_temp", bind="query-params"
    )
    ablate_ids = st.multiselect(
        t("bert.ablate"),
        whatif.head_ids(model.n_layers, model.n_heads),
        key="b_ablate",
        bind="query-params",
    )
    base_trace = None
    try:
        base_trace = bert.bert_trace(model, model_key, ui.text(), ui.pair())
    except ValueError as err:
        st.info(t("err.empty") if "empty" in str(err) else str(err))
        st.stop()
    tokens = base_trace.tokens
    masked = st.multiselect(
        t("bert.mask"),
        range(len(tokens)),
        format_func=lambda i: f"{i}: {tokens[i]}",
        key="b_mask",
        bind="query-params",
    )

ablate = whatif.parse_head_ids(ablate_ids)
knobs = dict(
    use_scale=use_scale,
    temperature=float(temperature),
    ablate=ablate,
    mask_tokens=tuple(masked),
)
changed = not use_scale or float(temperature) != 1.0 or ablate or masked
trace = bert.bert_trace(model, model_key, ui.text(), ui.pair(), **knobs) if changed else base_trace
ui.report_trace_notes(trace)
n_unk = sum(tok == "[UNK]" for tok in trace.tokens)
if n_unk:
    st.warning(t("bert.unk", n=n_unk))

follow = None
if changed:
    follow = whatif_panel.followed_head(trace)
    whatif_panel.results(whatif.compare(trace, base_trace), trace, base_trace, follow)
else:
    st.caption(t("bert.no_change"))

explorer.explorer(trace, default_view="overview", follow=follow)

ui.lesson_nav("bert")
