"""Pretrained BERT: the real model's attention, every tensor, plus what-if knobs with a diff."""

import streamlit as st

from attnviz import figures, ui
from attnviz.hooked import embedding_cosine
from attnviz.trace import weight_shift
from attnviz.ui import bert, explorer

t = ui.t
st.title(t("bert.title"))
st.caption(t("bert.intro"))

with st.sidebar:
    name = st.text_input(
        t("bert.model"), key="model", help=t("bert.model_help"), bind="query-params"
    )
    device = ui.url_select(
        st.selectbox,
        t("bert.device"),
        bert.devices(),
        "device",
        "auto",
        format_func={d: t(f"bert.device.{d}") for d in bert.devices()}.get,
    )

model = bert.get_model(name.strip() or None, device)
if model is None:
    st.stop()
model_key = (model.name, model.device)

with st.expander(t("bert.whatif"), expanded=True):
    st.caption(t("bert.whatif_help"))
    c1, c2 = st.columns([1, 1])
    use_scale = c1.toggle(t("pg.scale"), value=True, key="b_scale", bind="query-params")
    temperature = c2.number_input(
        t("pg.temperature"), 0.05, 20.0, value=1.0, step=0.25, key="b_temp", bind="query-params"
    )
    head_ids = [f"L{la}H{h}" for la in range(model.n_layers) for h in range(model.n_heads)]
    ablate_ids = st.multiselect(
        t("bert.ablate"),
        head_ids,
        key="b_ablate",
        placeholder=t("bert.pick_heads"),
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
        placeholder=t("bert.pick_tokens"),
        bind="query-params",
    )

ablate = tuple((int(x[1 : x.index("H")]), int(x[x.index("H") + 1 :])) for x in ablate_ids)
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

if changed:
    with st.container(border=True):
        cos = embedding_cosine(trace, base_trace)
        shift = weight_shift(trace, base_trace)  # [layer, head]
        c1, c2 = st.columns([1, 3])
        c1.metric(t("bert.cosine"), f"{cos:.4f}", help=t("bert.cosine_help"))
        with c2:
            fig = figures.heatmap(
                shift,
                [f"H{h}" for h in range(model.n_heads)],
                [f"L{la}" for la in range(model.n_layers)],
                title=t("bert.shift_title"),
                value_name="Δ",
                zmin=0.0,
                zmax=max(float(shift.max()), 1e-6),
                show_values=True,
                height=80 + 34 * model.n_layers,
                x_title="",
                y_title="",
            )
            fig.update_xaxes(tickangle=0)
            ui.chart(fig, key="shift")
        d1, d2 = st.columns(2)
        la = d1.slider(
            t("bert.diff_layer"), 0, model.n_layers - 1, 0, key="d_layer", bind="query-params"
        )
        h = d2.slider(
            t("bert.diff_head"), 0, model.n_heads - 1, 0, key="d_head", bind="query-params"
        )
        fig = figures.diff_heatmap(
            trace.layers[la].weights[h],
            base_trace.layers[la].weights[h],
            trace.key_tokens,
            trace.tokens,
            title=t("bert.diff_title", l=la, h=h),
            bound=1.0,
            height=460,
            value_name=t("w.diff"),
            x_title=t("w.key"),
            y_title=t("w.query"),
        )
        ui.chart(fig, key="diff")
else:
    st.caption(t("bert.no_change"))

explorer.explorer(trace, default_view="overview")
