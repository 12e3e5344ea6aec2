"""Why divide by sqrt(d_k) (notes 000, 004): variance, saturation and vanishing gradients, live."""

import math

import streamlit as st

from attnviz import StackConfig, ui
from attnviz.measures.stats import mean_max_weight
from attnviz.ui import url
from attnviz.views import charts
from attnviz.views.maps import Axis, Colour, Frame, Marks, draw_map

t = ui.t
st.title(t("ws.title"))
st.markdown(t("ws.intro"))

variance, saturation = ui.cached_sweeps()
d_ks = [row["d_k"] for row in variance]
c1, c2 = st.columns([3, 1])
with c1:
    fig = charts.lines(
        d_ks,
        {
            t("ws.var_measured"): [row["var_scores"] for row in variance],
            t("ws.var_theory"): [row["theory_scores"] for row in variance],
            t("ws.var_scaled"): [row["var_logits"] for row in variance],
            t("ws.var_one"): [row["theory_logits"] for row in variance],
        },
        title=t("ws.var_title"),
        x_title="d_k",
        log="xy",
        dashed=(t("ws.var_theory"), t("ws.var_one")),
    )
    ui.chart(fig, key="variance")
with c2:
    at64 = next(row for row in variance if row["d_k"] == 64)
    st.metric(t("ws.var_metric"), f"{at64['var_scores'] / 64:.3f}")
    st.metric(t("ws.std_metric"), f"{math.sqrt(at64['var_scores']):.2f}", help=t("ws.std_help"))

sat_d = sorted({row["d_k"] for row in saturation})


def series(key: str) -> dict[str, list[float]]:
    return {
        label: [row[key] for row in saturation if row["scaled"] is scaled]
        for label, scaled in ((t("ws.scaled"), True), (t("ws.unscaled"), False))
    }


n_keys = 16
c1, c2, c3 = st.columns(3)
with c1:
    fig = charts.lines(
        sat_d, series("max_weight"), title=t("ws.sat_title", n=n_keys), x_title="d_k", log="x"
    )
    ui.chart(fig, key="saturation")
with c2:
    fig = charts.lines(
        sat_d,
        series("entropy"),
        title=t("ws.ent_title", u=math.log(n_keys)),
        x_title="d_k",
        log="x",
    )
    ui.chart(fig, key="entropy")
with c3:
    fig = charts.lines(
        sat_d, series("jacobian_norm"), title=t("ws.jac_title"), x_title="d_k", log="x"
    )
    ui.chart(fig, key="jacobian")
st.caption(t("ws.jac_help"))

st.subheader(t("ws.live"))
d_k = st.select_slider(
    t("ws.live_dk"), url.key("ws_dk").options, value=url.default("ws_dk"), **url.bound("ws_dk")
)
on = ui.run_stack_trace(StackConfig(d_model=64, n_heads=1, d_head=d_k, use_scale=True))
# the same text again: its notes (truncation, empty text) were shown once already
off = ui.run_stack_trace(StackConfig(d_model=64, n_heads=1, d_head=d_k, use_scale=False), say=False)
if on is not None and off is not None:
    st.caption(
        t(
            "ws.live_help",
            d=d_k,
            on=mean_max_weight(on.layers[0].weights),
            off=mean_max_weight(off.layers[0].weights),
        )
    )
    c1, c2 = st.columns(2)
    for col, trace, label in ((c1, on, "ws.scaled"), (c2, off, "ws.unscaled")):
        with col:
            fig = draw_map(
                trace.layers[0].weights[0],
                Axis(trace.key_tokens, t("w.key")),
                Axis(trace.tokens, t("w.query")),
                Colour(zmin=0.0, zmax=1.0, value=t("w.weights")),
                Marks(),
                Frame(t(label), 420),
            )
            ui.chart(fig, key=f"live_{label}")

ui.lesson_nav("why_scale")
