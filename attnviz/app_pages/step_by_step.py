"""Step by step: QKᵀ -> / sqrt(d_k) -> softmax -> · V on a tiny example (notes 000, 001, 004)."""

import streamlit as st
import torch

from attnviz import ui
from attnviz.lessons import formulas
from attnviz.lessons.walkthrough import STEPS, column_form
from attnviz.ui import markup, url

t = ui.t
st.title(t("st.title"))
st.caption(t("st.intro"))

c1, c2, c3, c4, c5 = st.columns([2, 2, 1, 1, 1])
own = c1.toggle(t("st.own_text"), value=url.default("st_own"), **url.bound("st_own"))
d_k = c2.select_slider(
    t("st.d_k"), url.key("st_dk").options, value=url.default("st_dk"), **url.bound("st_dk")
)
use_scale = c3.toggle(t("pg.scale"), value=url.default("st_scale"), **url.bound("st_scale"))
causal = c4.toggle(t("pg.causal"), value=url.default("st_causal"), **url.bound("st_causal"))
temperature = c5.number_input(
    t("pg.temperature"), 0.05, 20.0, value=url.default("st_temp"), step=0.25,
    **url.bound("st_temp"),
)  # fmt: skip
knobs = formulas.Knobs(use_scale=use_scale, temperature=float(temperature), masked=causal)

try:
    wt = ui.cached_walkthrough(
        ui.text() if own else "我爱水课", d_k, use_scale, causal, float(temperature)
    )
except (ValueError, TypeError) as err:
    st.info(ui.input_problem(err))
    st.stop()

n, d = len(wt.tokens), wt.d_k
if wt.n_input_tokens > n:
    st.info(t("st.truncated", n=wt.n_input_tokens, k=n))
dims = [f"d{i}" for i in range(d)]
query = ui.url_select(  # in the URL by position: a repeated token ("the ... the") stays apart
    st.radio,
    t("st.query"),
    list(range(n)),
    "st_query",
    url.default("st_query", n=n),  # note 000 follows position 2, "爱"
    # radio options render Markdown: the labels are escaped
    format_func=dict(enumerate(markup.escape(s) for s in ui.distinct_labels(wt.tokens))).get,
    horizontal=True,
)

with st.expander(t("st.inputs"), expanded=False):
    st.caption(t("st.inputs_help", n=n, d=d))
    # Two matrices a row (one when d_k is wide or in projector mode): four or three abreast,
    # their numbers ran together at 1280 px ("-0.17-0.18-1.22").
    per_row = 1 if d >= 8 or st.session_state.get("projector") else 2
    inputs = [("X", wt.x, wt.tokens), ("W_q", wt.w_q, dims), ("W_k", wt.w_k, dims)]
    inputs.append(("W_v", wt.w_v, dims))
    for cell, (name, m, rows) in zip(ui.grid(4, per_row), inputs, strict=True):
        with cell:
            ui.numbers(m, dims, rows, name, key=f"in_{name}")
    for cell, (name, m) in zip(
        ui.grid(3, per_row), [("Q", wt.q), ("K", wt.k), ("V", wt.v)], strict=True
    ):
        with cell:
            ui.numbers(m, dims, wt.tokens, name, key=f"qkv_{name}", highlight=query)

url.seed("step", list(range(len(STEPS))), url.default("step"))
b1, b2, b3 = st.columns([1, 2, 1])
if b1.button(t("st.prev"), disabled=st.session_state.step == 0, width="stretch"):
    st.session_state.step -= 1
    st.rerun()
if b3.button(t("st.next"), disabled=st.session_state.step == len(STEPS) - 1, width="stretch"):
    st.session_state.step += 1
    st.rerun()
url.sync("step", url.default("step"))
step = STEPS[st.session_state.step]
b2.progress(
    (st.session_state.step + 1) / len(STEPS), text=t("st.step_of", i=st.session_state.step + 1)
)

title = t("st.step.scaled_off") if step == "scaled" and not use_scale else t(f"st.step.{step}")
if step == "scaled" and causal:
    title += t("st.step.mask_suffix")
st.subheader(title)
# The formula is written from the same knobs that computed the matrix below it.
st.latex(formulas.step(step, knobs))
explain = "st.explain.scaled_off" if step == "scaled" and not use_scale else f"st.explain.{step}"
st.markdown(t(explain, n=n, d=d, scale=d**-0.5))
if step in ("scaled", "weights", "z") and float(temperature) != 1.0:
    st.markdown(t("st.explain.temperature", temp=float(temperature), scale=wt.scale))
if step == "scaled" and causal:
    st.markdown(t("st.explain.mask"))
matrix, cols_, signed = {
    "scores": (wt.scores, wt.tokens, True),
    "scaled": (wt.scaled, wt.tokens, True),
    "weights": (wt.weights, wt.tokens, False),
    "z": (wt.z, dims, True),
}[step]
causal_mask = torch.ones(n, n, dtype=torch.bool).tril() if causal else None  # [q, k]
ui.numbers(
    matrix,
    cols_,
    wt.tokens,
    title,
    key="step_matrix",
    highlight=query,
    signed=signed,
    mask=causal_mask if step == "weights" else None,  # the scaled step shows M's −∞ itself
)
hidden = causal and step == "weights"  # keys after the query: masked, not a weight of 0


def cell(j: int, x) -> str:
    if hidden and j > query:
        return "–"
    return "−∞" if float(x) == float("-inf") else f"{float(x):.3f}"


row = ", ".join(cell(j, x) for j, x in enumerate(matrix[query]))
st.caption(t("st.row_caption", token=markup.escape(wt.tokens[query]), values=row))

with st.expander(t("st.columns_title"), expanded=step == "weights"):
    a, a_soft, diff = column_form(wt)
    st.markdown(t("st.columns_help", diff=diff))
    st.latex(formulas.column_form(knobs))
    c1, c2 = st.columns(2)
    with c1:
        ui.numbers(a, wt.tokens, wt.tokens, "A = KᵀQ", key="col_a")
    with c2:
        a_mask = None if causal_mask is None else causal_mask.T  # A' is [k, q]: columns are queries
        ui.numbers(a_soft, wt.tokens, wt.tokens, "A'", key="col_soft", signed=False, mask=a_mask)

ui.lesson_nav("step_by_step")
