"""Positions and norms: order blindness (note 004), relative-position attention as a convolution
(note 003), LayerNorm vs BatchNorm (note 002)."""

import pandas as pd
import streamlit as st

from attnviz import StackConfig, ui
from attnviz.engine.tokenize import tokenize
from attnviz.lessons.convolution import kernel_from_heads, quadratic_position_scores
from attnviz.lessons.norms import compare_norms, norm_example
from attnviz.ui import markup, url
from attnviz.views import charts, images

t = ui.t
st.title(t("po.title"))

st.subheader(t("po.order"))
st.caption(t("po.order_help"))
c1, c2 = st.columns(2)
first = c1.text_input(t("po.first"), url.default("po_a"), **url.bound("po_a"))
second = c2.text_input(t("po.second"), url.default("po_b"), **url.bound("po_b"))
try:
    check = ui.cached_order_check(first, second, StackConfig(d_model=64, n_heads=4, n_layers=2))
except (ValueError, TypeError):
    # Say which: a blank sentence, or two that are not the same tokens reordered.
    try:
        tokens = [" ".join(tokenize(s)) for s in (first, second)]
    except (ValueError, TypeError):
        st.info(t("po.err_empty"))
    else:
        st.info(t("po.err_order", a=markup.escape(tokens[0]), b=markup.escape(tokens[1])))
else:
    ui.table(
        pd.DataFrame(
            {
                t("po.token"): check.tokens_a,
                t("po.no_pe"): [f"{x:.1e}" for x in check.without_pe],
                t("po.pe"): [f"{x:.3f}" for x in check.with_pe],
            }
        ),
        hide_index=True,
        width="stretch",
    )

st.subheader(t("po.relative"))
st.caption(t("po.relative_help"))
st.latex(
    r"\begin{gathered}\delta = k - q,\quad r = [\delta^2,\ \delta],\quad"
    r" v = -\alpha\,[1,\ -2\Delta] \\"
    r" v \cdot r = -\alpha(\delta - \Delta)^2 + \alpha\Delta^2\end{gathered}"
)
c1, c2 = st.columns(2)
delta = c1.slider(t("po.delta"), -4, 4, url.default("po_delta"), **url.bound("po_delta"))
alpha = c2.select_slider(
    t("po.alpha"), url.key("po_alpha").options, value=url.default("po_alpha"),
    **url.bound("po_alpha"),
)  # fmt: skip
one = quadratic_position_scores(15, delta, alpha)
labels = [f"{int(d):+d}" for d in one.offsets.tolist()]
ui.chart(
    charts.bars(
        one.weights, labels, title=t("po.bars"), highlight=7 + delta, value_name=t("w.weights")
    ),
    key="po_bars",
)
maps = kernel_from_heads((7, 7), alpha)  # [head, row, col]
fig = images.mosaic(maps.view(3, 3, 7, 7).float(), images.Tiles(thumb=70), t("po.kernel"))
fig.update_xaxes(ticktext=["Δ₂ = −1", "Δ₂ = 0", "Δ₂ = +1"])
fig.update_yaxes(ticktext=["Δ₁ = −1", "Δ₁ = 0", "Δ₁ = +1"])
ui.chart(fig, key="po_kernel")
st.caption(t("po.kernel_help"))

st.subheader(t("po.norms"))
st.caption(t("po.norms_help"))
x = norm_example()
res, stats = compare_norms(x)
dims = [f"f{i}" for i in range(x.shape[-1])]
tokens = [f"t{i}" for i in range(x.shape[1])]
# Two to a row, LayerNorm beside BatchNorm: three in a row at 1280 px left ~23 px a cell, and
# the numbers ("-2.95") ran into each other.
c1, _ = st.columns(2)
c2, c3 = st.columns(2)
for col, (name, m) in zip(
    (c1, c2, c3),
    (("po.x", x[0]), ("po.ln", res.layer_norm[0]), ("po.bn", res.batch_norm[0])),
    strict=True,
):
    with col:
        ui.numbers(m, dims, tokens, t(name), key=f"norm_{name}")

ui.lesson_nav("positions")
